import torch
from torch import Tensor

from lightning_modules.encodings.rope import RoPE
from pe_core.ranges import PositiveFloat


class XPos(RoPE):
    """xPos: rotary embedding with an exponential decay, q scaled by zeta^(n/scale_base), k by its inverse.

    Sun et al. 2022, "A Length-Extrapolatable Transformer". zeta_i = (2i/R + 0.4) / 1.4 per rotated pair, so
    q_n . k_m carries zeta^((n - m)/scale_base): a decay with distance, hence causal-only (bidirectionally
    the factor grows for keys after the query). Positions are centred at (max position + 1) // 2 before the
    exponent, as x-transformers (the centre cancels in q.k). Checked against x-transformers'
    `RotaryEmbedding(use_xpos=True, scale_base=...)` + `apply_rotary_pos_emb` (q by scale, k by 1/scale);
    inherits every RoPE option. Shapes: q, k (B, H, L, D); scale (L, R) or (B, 1, L, R).
    """

    name = "xpos"
    init_reference = {}
    causal_only = True
    kv_cache = False  # the centre of the decay moves with the longest position: cached keys would go stale

    def __init__(self, *, scale_base: PositiveFloat = 512.0, **options):
        super().__init__(**options)
        self.scale_base = scale_base
        zeta = (torch.arange(0, self.rotary_dim, 2).float() + 0.4 * self.rotary_dim) / (1.4 * self.rotary_dim)
        self.register_buffer("zeta", zeta.repeat_interleave(2), persistent=False)  # (R,) one per rotated dim

    def decay(self, positions: Tensor) -> Tensor:
        """(L,) or (B, L) positions -> (L, R) or (B, 1, L, R) query scales (keys take the inverse)."""
        power = (positions - (positions.max() + 1) // 2).float() / self.scale_base
        scale = self.zeta ** power[..., None]
        return scale if positions.dim() == 1 else scale[:, None]

    def _scales(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        scale = self.decay(positions)
        return scale, scale.reciprocal()

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos_sin = self.cos_sin(positions)
        scale, inverse = self._scales(positions)
        return self.rotate_one(q, cos_sin, scale), self.rotate_one(k, cos_sin, inverse)
