import torch
from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.errors import ConfigError


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate consecutive pairs (x_2i, x_2i+1) of the last dim of x (..., R) by angles a_i, given at full width
    as cos = (cos a_0, cos a_0, cos a_1, ...) and sin = (-sin a_0, sin a_0, -sin a_1, ...) (`RoPE.cos_sin`):
    x * cos + (x_1, x_0, x_3, x_2, ...) * sin, x-transformers' rotate_half form for interleaved pairs. Bitwise
    equal to (x_2i cos - x_2i+1 sin, x_2i sin + x_2i+1 cos), with one copy (the swap) instead of three."""
    swapped = torch.stack((x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)  # (..., R)
    return x * cos + swapped * sin


class RoPE(PositionalEncoding):
    """Rotary position embedding: rotate each (q, k) pair 2i, 2i+1 by angle pos * base^(-2i/R).

    Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding". Interleaved pairs as
    in the paper (and x-transformers' `RotaryEmbedding` + `apply_rotary_pos_emb`, checked against it with
    the same settings). q.k then depends only on the distance j - i. Options:
    `base`; `rotary_dim` R (partial rotary, GPT-J: only the first R dims of each head rotate, the
    frequencies use R; default R = D); `interpolation_factor` s >= 1 (position interpolation, Chen et al.
    2023: angles of pos / s); `ntk_base_rescale` a (NTK-aware scaling, bloc97 2023: base * a^(R/(R-2)), as
    x-transformers' `base_rescale_factor`, which also uses the rotated dim R).
    Shapes: q, k (B, H, L, D); angles (L, R/2) or (B, 1, L, R/2).
    """

    name = "rope"
    shift_invariant = True

    def __init__(self, *, base: float = 10000.0, rotary_dim: int | None = None, interpolation_factor: float = 1.0,
                 ntk_base_rescale: float = 1.0, **common):  # fmt: skip
        super().__init__(**common)
        self.rotary_dim = R = self.head_dim if rotary_dim is None else rotary_dim
        if R % 2 or not 0 < R <= self.head_dim:
            raise ConfigError(f"{self.name} needs an even rotary_dim in [2, head dim {self.head_dim}], got {R}")
        if interpolation_factor < 1:
            raise ConfigError(f"interpolation_factor must be >= 1, got {interpolation_factor}")
        if ntk_base_rescale != 1 and R <= 2:
            raise ConfigError(f"ntk_base_rescale needs rotary_dim > 2, got {R}")
        if ntk_base_rescale != 1:
            base = base * ntk_base_rescale ** (R / (R - 2))
        self.interpolation_factor = interpolation_factor
        inv_freq = base ** (-torch.arange(0, R, 2).float() / R)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (R/2,)
        self.register_position_table("rotations", "cos_sin_table")  # (2, N, R)

    def angles(self, positions: Tensor) -> Tensor:
        """(L,) or (B, L) positions -> (L, R/2) or (B, 1, L, R/2) angles."""
        angles = positions.float()[..., None] * self.inv_freq / self.interpolation_factor
        return angles if positions.dim() == 1 else angles[:, None]

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """(L, R) or (B, 1, L, R) cos and signed sin of `angles(positions)`, each angle twice, as
        `rotate_pairs` takes them: rows of the `rotations` position table."""
        cos, sin = self.rotations[:, positions]  # each (L, R) or (B, L, R)
        return (cos, sin) if positions.dim() == 1 else (cos[:, None], sin[:, None])

    def cos_sin_table(self, positions: Tensor) -> Tensor:
        """(N,) positions -> (2, N, R): cos and signed sin of their angles, each angle twice."""
        angles = self.angles(positions)
        cos, sin = angles.cos(), angles.sin()
        return torch.stack((cos.repeat_interleave(2, dim=-1), torch.stack((-sin, sin), dim=-1).flatten(-2)))

    def rotate_one(self, x: Tensor, cos_sin: tuple[Tensor, Tensor], scale: Tensor | None = None) -> Tensor:
        """Rotate (and scale, for xPos) the first R dims of x (B, H, L, D); the rest pass through."""
        rotated = rotate_pairs(x[..., : self.rotary_dim], *cos_sin)
        if scale is not None:
            rotated = rotated * scale
        if self.rotary_dim < x.shape[-1]:
            rotated = torch.cat((rotated, x[..., self.rotary_dim :]), dim=-1)
        return rotated.type_as(x)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos_sin = self.cos_sin(positions)
        return self.rotate_one(q, cos_sin), self.rotate_one(k, cos_sin)
