from typing import Annotated

import torch
from annotated_types import Ge
from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod, position_at
from lightning_modules.encodings.t5_bias import distances, relative_distance
from pe_core.errors import ConfigError


class Sandwich(PositionalEncoding):
    """Sandwich: the inner product of two sinusoidal position embeddings as a logit bias, with no embedding
    added to the input.

    Chi et al., ACL 2023, "Dissecting Transformer Length Extrapolation via the Lens of Receptive Field
    Analysis": p_i . p_j = sum_{k=1}^{d'/2} cos((i - j) / 10000^(2k/d')), shifted by -d'/2 (0 at distance 0,
    negative elsewhere) and divided by 8h/H for head h = 1..H (ALiBi-like per-head slopes):
    bias_h(i, j) = (p_i . p_j - d'/2) * H / (8h). `sandwich_dim` d' (128 by default). No parameters; the
    same for causal and bidirectional use (symmetric in i - j). Checked against the closed form; NeMo's
    `sandwich_pos_bias` has the same shift and head scaling but sums the angles without the cosine, and sums
    k = 1..d'/2 - 1. The shifted inner product, a function of j - i, is a position table over distances.
    """

    name = "sandwich"
    init_reference = {}
    shift_invariant = True
    flex = True

    def __init__(self, *, sandwich_dim: Annotated[int, Ge(2)] = 128, **common):
        super().__init__(**common)
        if sandwich_dim % 2:
            raise ConfigError(f"sandwich_dim must be even, got {sandwich_dim}")
        self.sandwich_dim = sandwich_dim
        k = torch.arange(1, sandwich_dim // 2 + 1).float()
        self.register_buffer("inv_freq", 10000.0 ** (-2 * k / sandwich_dim), persistent=False)  # (d'/2,)
        heads = torch.arange(1, self.num_heads + 1).float()
        self.register_buffer("head_scale", (self.num_heads / (8 * heads))[:, None, None], persistent=False)
        self.register_position_table("distance_inner", "distance_inner_table")  # (2N - 1,)

    def bias(self, positions: Tensor) -> Tensor:
        inner = self.distance_inner[relative_distance(positions) + self.table_length - 1]  # (..., L, L)
        return inner.unsqueeze(-3) * self.head_scale  # (..., H, L, L)

    def score_mod(self, positions: Tensor) -> ScoreMod:
        at, inner, scale, offset = (
            position_at(positions),
            self.distance_inner,
            self.head_scale.flatten(),
            self.table_length - 1,
        )
        return lambda score, b, h, i, j: score + inner[at(b, j) - at(b, i) + offset] * scale[h]

    def distance_inner_table(self, positions: Tensor) -> Tensor:
        """(N,) positions 0..N-1 -> (2N - 1,) p_i . p_j - d'/2 = sum_k cos((j - i) w_k) - d'/2 for every distance."""
        angles = distances(len(positions), positions.device).float()[:, None] * self.inv_freq  # (2N - 1, d'/2)
        return angles.cos().sum(-1) - self.sandwich_dim / 2
