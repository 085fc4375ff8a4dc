from typing import Annotated

import torch
from annotated_types import Ge
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.init_reference import ZEROS


class CoPE(PositionalEncoding):
    """Contextual position encoding: positions counted by content-dependent gates, not by tokens.

    Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count What's Important" (Appendix B code).
    In every layer, gates g_ij = sigmoid(q_i . k_j / sqrt(D)) for j <= i (0 for j > i); the position of key j
    from query i is p_ij = sum_{t=j}^{i} g_it, clamped to max_pos - 1; the logit term is q_i . e[p_ij], linearly
    interpolated between the integer positions floor(p_ij) and ceil(p_ij), with e a (max_pos, D) table shared
    by the heads and initialised to zero (as the paper's code). Added to the scaled content logits unscaled.
    Causal only (the paper's and x-transformers' setting: bidirectionally the count would include later keys).
    Deviation: one table for all layers (the encoding is shared by the layers); the paper and x-transformers
    hold one per layer. Checked against x-transformers' `CoPE` (soft_onehot=False, talking_heads=False).
    `max_pos` (64 by default): the largest position + 1 the counts can reach. Ignores `positions` (counts
    replace them) except through the causal mask.
    """

    name = "cope"
    init_reference = {"table": ZEROS}  # x-transformers CoPE: pos_emb = zeros(max_pos, dim_head)
    causal_only = True
    shift_invariant = True  # positions enter only through the causal order

    def __init__(self, *, max_pos: Annotated[int, Ge(2)] = 64, **common):
        super().__init__(**common)
        self.max_pos = max_pos
        self.table = nn.Parameter(torch.zeros(max_pos, self.head_dim))  # (P, D)

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        logits = q @ k.transpose(-1, -2) * self.head_dim**-0.5  # (B, H, L, L)
        gates = logits.sigmoid().tril()  # keys after the query count nothing
        counts = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.max_pos - 1)  # (B, H, L, L)
        per_position = q @ self.table.t()  # (B, H, L, P)
        floor = counts.floor()
        low = per_position.gather(-1, floor.long())
        high = per_position.gather(-1, counts.ceil().long())
        weight = counts - floor
        return high * weight + low * (1 - weight)
