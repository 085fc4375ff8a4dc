import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.init_reference import ZEROS
from pe_core.ranges import AboveOne


def polar(x: Tensor, phases: Tensor) -> Tensor:
    """(..., D) features and phases -> (..., 2D): magnitudes softplus(x) at the phases, as (cos, sin) halves,
    computed in fp32 (x-transformers' `apply_polar_pos_emb`) and returned in x's dtype."""
    magnitude = F.softplus(x.float())
    return torch.cat((magnitude * phases.cos(), magnitude * phases.sin()), dim=-1).type_as(x)


class PoPE(PositionalEncoding):
    """Polar positional embedding: each of the D head dims is one complex number, magnitude softplus(q_c) (or
    softplus(k_c)) and phase pos * theta_c, the key's phase shifted by a learned per-head offset delta_c.

    Gopalakrishnan et al. 2025, "Decoupling the 'What' and 'Where' With Polar Coordinate Positional
    Embeddings" (arXiv 2509.10534), as x-transformers' `PolarEmbedding` + `apply_polar_pos_emb`
    (`polar_pos_emb=True`): theta_c = base^(-c/D) for c = 0..D-1 (one frequency per dim, not per pair), q and
    k become (B, H, L, 2D) real vectors (cos half, sin half), so q_i . k_j = sum_c softplus(q_c) softplus(k_c)
    cos((i - j) theta_c - delta_c): content in the magnitudes, position in the phases only. delta (H, 1, D) is
    clamped to [-2 pi, 0] in every forward; it starts at 0 (x-transformers' default), or U(-2 pi, 0) with
    `bias_uniform_init` (x-transformers' `polar_bias_uniform_init`). The logit scale stays 1/sqrt(D), D the
    head dim before the doubling, as x-transformers. Values keep their width D. Checked against x-transformers
    with the same q, k, positions and delta.
    """

    name = "pope"
    init_reference = {"phase_bias": ZEROS}  # x-transformers: torch.zeros(heads, 1, dim_head)
    shift_invariant = True

    def __init__(self, *, base: AboveOne = 10000.0, bias_uniform_init: bool = False, **common):
        super().__init__(**common)
        D = self.head_dim
        self.base = base
        self.register_buffer("inv_freq", base ** (-torch.arange(D).float() / D), persistent=False)  # (D,)
        self.phase_bias = nn.Parameter(torch.zeros(self.num_heads, 1, D))  # delta, (H, 1, D)
        if bias_uniform_init:
            nn.init.uniform_(self.phase_bias, -2 * math.pi, 0.0)
        self.register_position_table("phases", "phase_table")  # (N, D)

    def phase_table(self, positions: Tensor) -> Tensor:
        """(...,) positions -> (..., D) phases pos * theta_c."""
        return positions.float()[..., None] * self.inv_freq

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        phases = self.phases[positions]  # (L, D) or (B, L, D)
        if positions.dim() == 2:
            phases = phases[:, None]  # (B, 1, L, D)
        offset = self.phase_bias.float().clamp(-2 * math.pi, 0.0)  # (H, 1, D)
        return polar(q, phases), polar(k, phases + offset)
