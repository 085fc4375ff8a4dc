from typing import Literal

import torch
from torch import Tensor, nn

from lightning_modules.encodings.lie_rotation import SkewGeneratorRotation
from pe_core.ranges import PositiveFloat, PositiveInt


class ComRoPE(SkewGeneratorRotation):
    """ComRoPE: rotary position encoding by trainable commuting angle matrices, in 1-D.

    Yu et al., CVPR 2025, "ComRoPE: Scalable and Robust Rotary Position Embedding Parameterized by Trainable
    Commuting Angle Matrices": R(x) = exp(sum_i x_i A_i) with A_i = diag(B_i1, ..., B_im) block diagonal, blocks of
    size b = `block_size` (default 2, the reference config's), skew-symmetric and commuting across axes i (Eq. of
    its Sec. 3: then R(x)^T R(y) = R(y - x), the RoPE equation). Its two solutions: ComRoPE-AP (axis partition),
    B_ij = P_j - P_j^T when j = i mod N, else 0; ComRoPE-LD (linearly dependent), B_ij = theta_ij (P_j - P_j^T).
    With one axis (N = 1) commutation is automatic; AP gives every block to the one axis, A = diag(P_j - P_j^T);
    LD keeps its scale theta_j per block (the reference's `multiplier`, shape (1, axes, blocks, 1, 1): per axis
    and per block, not the README's per axis only), which is redundant with P in 1-D but changes the training
    dynamics. `variant` picks one, default "ld" (the paper's LD form with one axis; "ap" is LieRE's form with
    b x b blocks). As the reference code (Longin-Yu/ComRoPE, model.py, `ComRoPELDAttention` /
    `ComRoPEAPAttention`): P ~ N(0, init_std^2) per head (init_std 1, its config default), theta ~ N(0, 1) shared
    by the heads, P - P^T the full antisymmetrisation, exp in float32 (`torch.matrix_exp`; for b = 2 here its
    closed form cos / sin), R(x) q on contiguous blocks. Deviations: 1-D positions (the reference supports 2 or 3
    axes); positions are token indices times `position_scale` (default 1; the reference's `axis_scale` normalises
    patch positions to (p + 0.5) / num_patches: position_scale = 1 / training length reproduces it, the 0.5 offset
    cancels in R(m)^T R(n)); q is not pre-scaled (the model applies 1/sqrt(D) to the logits).
    Shapes: q, k (B, H, L, D); positions (L,) or (B, L).
    """

    name = "comrope"
    init_reference = {"angle_base": ("normal", 1.0), "multiplier": ("normal", 1.0)}

    def __init__(self, *, variant: Literal["ld", "ap"] = "ld", block_size: PositiveInt = 2,
                 init_std: PositiveFloat = 1.0, **options):  # fmt: skip
        super().__init__(block_size=block_size, **options)
        self.variant, self.init_std = variant, init_std
        base = torch.randn(self.num_heads, self.num_blocks, self.block_size, self.block_size) * init_std
        self.angle_base = nn.Parameter(base)  # P: (H, D/b, b, b)
        self.multiplier = nn.Parameter(torch.randn(self.num_blocks)) if variant == "ld" else None  # theta: (D/b,)

    def generator(self) -> Tensor:
        base = self.angle_base.float()
        skew = base - base.transpose(-1, -2)
        return skew if self.multiplier is None else skew * self.multiplier.float()[:, None, None]

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, {super().extra_repr()}, init_std={self.init_std:g}"
