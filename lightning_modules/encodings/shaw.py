import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod, position_at
from lightning_modules.encodings.t5_bias import relative_distance
from pe_core.ranges import PositiveInt


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool, scale: float) -> Tensor:
    """SDPA's softmax weights written out: (B, H, L, L) from q, k and a bool (True = may attend), float or
    absent mask, with the same meaning as `scaled_dot_product_attention`'s. A query that may attend no key
    (a fully padded row, or a left-padded causal one) gets all-zero weights, as SDPA gives it, not NaN (which
    would reach the real tokens through 0 * NaN in the next layer); its logits are zeroed before the softmax
    so the backward stays finite too."""
    logits = q @ k.transpose(-1, -2) * scale  # (B, H, L, L)
    if is_causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask
    empty = logits.isneginf().all(dim=-1, keepdim=True)  # (B, H, L, 1) queries with no key
    return logits.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)


def glorot_bound(enc) -> float:
    """sqrt(6 / (2k + 1 + D)): the Glorot uniform bound of a (2k + 1, D) table, Shaw's reference init."""
    return math.sqrt(6 / (2 * enc.max_relative + 1 + enc.head_dim))


class Shaw(PositionalEncoding):
    """Shaw relative positions: learned a^K_{clip(j - i, k)} added to the keys, optionally a^V to the values.

    Shaw, Uszkoreit & Vaswani, NAACL 2018, "Self-Attention with Relative Position Representations".
    Logits (q_i . k_j + q_i . a^K_ij) / sqrt(D): the key term is a `content_bias`, scaled like the content.
    `values`: z_i = sum_j w_ij (v_j + a^V_ij), through the `attend` hook (explicit softmax, the only path
    that needs the weights; without it attention stays on SDPA). a^K, a^V: (2k + 1, D) tables, k =
    `max_relative`, shared by the heads (as the paper) and, our choice, by all layers (the paper has one pair
    per layer). Init as the reference tensor2tensor code (`_generate_relative_positions_embeddings`, a
    `tf.get_variable` under transformer_base's `uniform_unit_scaling` initializer, gain 1: variance scaling,
    fan_avg, uniform), i.e. Glorot uniform U(-a, a), a = sqrt(6 / (2k + 1 + D)).
    Checked against written-out formulas.
    Shapes: q, k, v (B, H, L, D); index (L, L) or (B, L, L); content_bias (B, H, L, L).
    """

    name = "shaw"
    init_reference = {"key_table.weight": ("uniform", lambda e: -glorot_bound(e), glorot_bound)}  # tensor2tensor
    flex = True  # off with `values`
    shift_invariant = True

    def __init__(self, *, max_relative: PositiveInt = 16, values: bool = False, **common):
        super().__init__(**common)
        self.max_relative = max_relative
        self.flex = self.kv_cache = not values  # the value term needs the square attention weights
        self.key_table = nn.Embedding(2 * max_relative + 1, self.head_dim)  # a^K
        self.value_table = nn.Embedding(2 * max_relative + 1, self.head_dim) if values else None  # a^V
        for table in (self.key_table, self.value_table):
            if table is not None:
                nn.init.xavier_uniform_(table.weight)

    def relative_index(self, positions: Tensor) -> Tensor:
        """(..., L) positions -> (..., L, L) table rows clip(j - i, -k, k) + k."""
        return relative_distance(positions).clamp(-self.max_relative, self.max_relative) + self.max_relative

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        index = self.relative_index(positions).unsqueeze(-3).expand(*q.shape[:-1], k.shape[-2])  # (B, H, L, L)
        return (q @ self.key_table.weight.T).gather(-1, index) * self.attention_scale()  # q_i . a^K_ij

    def content_score_mod(self, q: Tensor, k: Tensor, positions: Tensor) -> ScoreMod:
        per_row = (q @ self.key_table.weight.T) * self.attention_scale()  # (B, H, L, 2k + 1): q_i . a^K_r
        at, m = position_at(positions), self.max_relative
        return lambda score, b, h, i, j: score + per_row[b, h, i, (at(b, j) - at(b, i)).clamp(-m, m) + m]

    @property
    def sink_capable(self) -> bool:
        """Without relative values its `attend` is SDPA's (the relative values index the weights by distance)."""
        return self.value_table is None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, is_causal: bool, dropout_p: float,
               scale: float, positions: Tensor) -> Tensor:  # fmt: skip
        if self.value_table is None:
            return super().attend(q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale,
                                  positions=positions)  # fmt: skip
        weights = F.dropout(attention_weights(q, k, mask, is_causal, scale), p=dropout_p)  # (B, H, L, L)
        index = self.relative_index(positions).unsqueeze(-3).expand_as(weights)
        per_row = weights.new_zeros(*weights.shape[:-1], self.value_table.num_embeddings)  # (B, H, L, 2k+1)
        per_row.scatter_add_(-1, index, weights)  # weight of each clipped distance
        return weights @ v + per_row @ self.value_table.weight  # (B, H, L, D)
