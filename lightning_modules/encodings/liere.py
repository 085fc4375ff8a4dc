import math

import torch
from torch import Tensor, nn

from lightning_modules.encodings.lie_rotation import SkewGeneratorRotation

LIERE_INIT_RANGE = 2 * math.pi  # the reference's generator entries ~ U(0, 2 pi) (RoPE-Mixed's random angles)


class LieRE(SkewGeneratorRotation):
    """LieRE: rotary position encoding by the exponential of a learned skew-symmetric generator, in 1-D.

    Ostmeier et al. 2024/25, "LieRE: Generalizing Rotary Position Encodings" (Sec. 3): R(p) = exp(sum_i p_i S_i),
    S_i = B_i - B_i^T in so(D) learned, q -> R(p) q, k -> R(p) k, so q^T R(m)^T R(n) k = q^T exp((n - m) S) k in
    1-D (one generator S, one position axis). As the reference code (StanfordMIMI/LieRE, models/rope_vit.py,
    `LierePositionEncoder` with phase_type "learned" and `FlexibleAttention.apply_transforms`): S is block
    diagonal with blocks of `block_size` b (its `generator_dim`; None: one block, the head dim, the paper's
    general so(D); its ImageNet script uses 8), S = U - U^T with U the strict upper triangle of the raw
    parameter (`torch.triu(raw, 1)`, its "- 0.5" cancels in U - U^T), raw ~ U(0, 2 pi), one generator per head
    (`per_head`, the reference configs' rotary_embedding_per_head: True) or one shared; R(p) x on contiguous
    blocks; exp in float32. Deviations: 1-D positions (the reference is 2-D / 3-D over image patches); positions
    are token indices times `position_scale` (default 1; the reference's patch positions run over [0, 1] on the
    training grid, `linspace(0, 1, steps)`: position_scale = 1 / (training length - 1) reproduces it); one
    generator for all layers (its default rotary_embedding_per_layer: False); no [CLS] identity slot (a token at
    position 0 gets R(0) = I anyway). The lower triangle of the raw parameter is unused (zero gradient), as in the
    reference.
    Shapes: q, k (B, H, L, D); positions (L,) or (B, L).
    """

    name = "liere"
    init_reference = {"generator_raw": ("uniform", 0.0, LIERE_INIT_RANGE)}

    def __init__(self, *, per_head: bool = True, **options):
        super().__init__(**options)
        self.per_head = per_head
        heads = self.num_heads if per_head else 1
        raw = torch.rand(heads, self.num_blocks, self.block_size, self.block_size) * LIERE_INIT_RANGE
        self.generator_raw = nn.Parameter(raw)  # (H or 1, D/b, b, b)

    def generator(self) -> Tensor:
        upper = torch.triu(self.generator_raw.float(), diagonal=1)
        return upper - upper.transpose(-1, -2)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, per_head={self.per_head}"
