import torch
from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.errors import ConfigError


def rotate_pairs(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate consecutive pairs (x_2i, x_2i+1) of the last dim of x by angles (..., D/2)."""
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, H, L, D/2)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class RoPE(PositionalEncoding):
    """Rotary position embedding: rotate each (q, k) pair 2i, 2i+1 by angle pos * base^(-2i/D).

    Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding". Interleaved pairs as
    in the paper (and x-transformers' `RotaryEmbedding` + `apply_rotary_pos_emb`, checked against it).
    q.k then depends only on the distance j - i. Options: `base`.
    """

    name = "rope"
    shift_invariant = True

    def __init__(self, *, dim, num_heads, max_length, causal, base: float = 10000.0):
        super().__init__(dim=dim, num_heads=num_heads, max_length=max_length, causal=causal)
        if self.head_dim % 2:
            raise ConfigError(f"rope needs an even head dim, got {self.head_dim}")
        inv_freq = base ** (-torch.arange(0, self.head_dim, 2).float() / self.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (D/2,)

    def angles(self, positions: Tensor) -> Tensor:
        """(L,) or (B, L) positions -> (L, D/2) or (B, 1, L, D/2) angles."""
        angles = positions.float()[..., None] * self.inv_freq
        return angles if positions.dim() == 1 else angles[:, None]

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        angles = self.angles(positions)
        return rotate_pairs(q, angles).type_as(q), rotate_pairs(k, angles).type_as(k)
