from typing import Literal

import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.init_reference import BERT, ONES, ZEROS
from lightning_modules.encodings.t5_bias import T5Bias, bucket_bias
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt


def bert_init(*modules: nn.Module) -> None:
    """The official TUPE code's `init_bert_params` (github.com/guolinke/TUPE, applied to the whole model by
    `BertModel.__init__`, so also to its position table, U^Q / U^K and relative table): Linear and Embedding
    weights N(0, 0.02), Linear biases 0."""
    for module in modules:
        nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


class TupeA(PositionalEncoding):
    """TUPE-A: untied absolute positional attention, no position added to the word embeddings.

    Ke, He & Liu, ICLR 2021, "Rethinking Positional Encoding in Language Pre-training" (PAPERS.md
    section 2). Logits = (x W^Q)(x W^K)^T / sqrt(2D) + (p U^Q)(p U^K)^T / sqrt(2D), p = LayerNorm of a
    learned table, U^Q, U^K per head and shared across layers (so the term is one shared bias).
    `untie_cls`: row 0 ([CLS] attending) := theta_1, column 0 for rows >= 1 := theta_2, as in the
    official code: table row 0 is p_theta1, row 1 is position 0 and also gives p_theta2. Only meaningful
    where position 0 holds [CLS]: unset, it follows `cls_first` (on for the masked-LM and classification
    models, off for causal, synthetic and translation models) and is off for `mode="bert_ad"` (the paper's
    BERT-Ad has no [CLS] untying); set true without [CLS] at position 0 it is refused.
    Init (`bert_init`): table, U^Q, U^K N(0, 0.02), biases 0, LayerNorm 1 / 0, as the official code's
    `init_bert_params` (github.com/guolinke/TUPE); PyTorch's default Linear init would be 2.5x larger at C=128.
    `proj_bias`: the official code's bias on U^Q, U^K (off: the paper has none).
    `mode="bert_ad"`: the paper's BERT-Ad ablation, the cross terms kept with untied projections:
    ((x W^Q)(x W^K)^T + (x W^Q)(p U^K)^T + (p U^Q)(x W^K)^T + (p U^Q)(p U^K)^T) / sqrt(4D); the cross terms
    need the content q, k, so they are a `content_bias` (recomputed per layer from the shared p U); p and U
    as TUPE's (LayerNorm, shared across layers: the paper does not say otherwise); the [CLS] reset, when on,
    touches only the position-position term (BERT-Ad itself: `untie_cls=false`).
    Shapes: table (num_positions + 1, C); p U (..., H, L, D); logits (..., H, L, L).
    """

    name = "tupe_a"
    init_reference = {"table.weight": BERT, "norm.weight": ONES, "norm.bias": ZEROS, "proj_q.weight": BERT,
                      "proj_k.weight": BERT}  # fmt: skip

    def __init__(self, *, untie_cls: bool | None = None, proj_bias: bool = False,
                 mode: Literal["untied", "bert_ad"] = "untied", **common):  # fmt: skip
        super().__init__(**common)
        if untie_cls and not self.cls_first:
            raise ConfigError(f"{self.name}: untie_cls needs [CLS] at position 0 (masked-LM or classification "
                              "models); this model has none: leave untie_cls unset or false")  # fmt: skip
        if untie_cls is None:
            untie_cls = self.cls_first and mode != "bert_ad"
        self.max_positions, self.untie_cls, self.mode = self.num_positions, untie_cls, mode
        self.table = nn.Embedding(self.num_positions + 1, self.dim)  # row 0: p_theta1; row p+1: position p
        bert_init(self.table)
        self.norm = nn.LayerNorm(self.dim)
        self.proj_q = nn.Linear(self.dim, self.dim, bias=proj_bias)
        self.proj_k = nn.Linear(self.dim, self.dim, bias=proj_bias)
        bert_init(self.proj_q, self.proj_k)

    @property
    def weight(self) -> Tensor:
        """The (num_positions, C) absolute table p_0..p_{N-1} (row 0, [CLS]'s p_theta, left out), for the
        PE-Study probes (the vectors TUPE projects; its LayerNorm and U^Q / U^K act on them per layer)."""
        return self.table.weight[1:]

    def attention_scale(self) -> float:
        return ((4 if self.mode == "bert_ad" else 2) * self.head_dim) ** -0.5

    def projections(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """(..., L) table rows -> p U^Q and p U^K, each (..., H, L, D)."""
        p = self.norm(self.table(rows))  # (..., L, C)
        q = self.proj_q(p).unflatten(-1, (self.num_heads, self.head_dim)).transpose(-2, -3)
        k = self.proj_k(p).unflatten(-1, (self.num_heads, self.head_dim)).transpose(-2, -3)
        return q, k

    def _logits(self, rows: Tensor) -> Tensor:
        """(..., L) table rows -> (..., H, L, L) scaled positional logits."""
        q, k = self.projections(rows)
        return q @ k.transpose(-1, -2) * self.attention_scale()  # (..., H, L, L)

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor | None:
        """BERT-Ad's cross terms (x W^Q)(p U^K)^T + (p U^Q)(x W^K)^T, scaled; None for TUPE."""
        if self.mode != "bert_ad":
            return None
        pos_q, pos_k = self.projections(positions + 1)  # (..., H, L, D)
        return (q @ pos_k.transpose(-1, -2) + pos_q @ k.transpose(-1, -2)) * self.attention_scale()

    def cls_masks(self, length: int, device) -> tuple[Tensor, Tensor]:
        """(L, L) masks of the [CLS] row (row 0) and of the [CLS] column below it."""
        index = torch.arange(length, device=device)
        row0 = (index[:, None] == 0).expand(length, length)
        col0 = (index[None, :] == 0) & (index[:, None] > 0)
        return row0, col0

    def untied(self, positions: Tensor) -> Tensor:
        """The untied absolute term after the [CLS] reset, (..., H, L, L)."""
        logits = self._logits(positions + 1)
        if not self.untie_cls:
            return logits
        thetas = self._logits(torch.arange(2, device=positions.device)).diagonal(dim1=-2, dim2=-1)  # (H, 2)
        # the reset of `cls_masks`, written into the fresh logits: O(L) copies instead of two (H, L, L) selects
        logits[..., 1:, 0] = thetas[:, 1, None]  # tokens -> [CLS]: theta_2
        logits[..., 0, :] = thetas[:, 0, None]  # [CLS] -> all: theta_1
        return logits

    def bias(self, positions: Tensor) -> Tensor:
        return self.untied(positions)


class TupeR(TupeA):
    """TUPE-R: TUPE-A plus a T5 relative bias b_bucket(j-i) per head, added unscaled.

    Ke, He & Liu, ICLR 2021 (PAPERS.md section 2). Buckets as T5 (32, max distance 128). With
    `untie_cls` the [CLS] row and column get their own buckets, as in the official code: row 0 ->
    bucket 16 (never produced bidirectionally), column 0 -> an extra bucket 32; causal mode uses
    two extra buckets (32, 33) since all 32 are produced there. Relative table N(0, 0.02) (`bert_init`,
    the official code's `init_bert_params`; PyTorch's default N(0, 1) would shape attention from step 0).
    """

    name = "tupe_r"
    init_reference = {**TupeA.init_reference, "relative_table.weight": BERT}

    def __init__(self, *, num_buckets: PositiveInt = 32, max_distance: PositiveInt = 128, **kwargs):
        super().__init__(**kwargs)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.cls_buckets = (num_buckets // 2, num_buckets) if not self.causal else (num_buckets, num_buckets + 1)
        extra = (1 if not self.causal else 2) if self.untie_cls else 0
        self.relative_table = nn.Embedding(num_buckets + extra, self.num_heads)
        bert_init(self.relative_table)
        self.register_position_table("distance_buckets", "distance_buckets_table")

    distance_buckets_table = T5Bias.distance_buckets_table
    untrained_note = T5Bias.untrained_note

    def relative_buckets(self, positions: Tensor) -> Tensor:
        """(..., L) positions -> (..., L, L) bucket ids, with the [CLS] reset when untied."""
        buckets = T5Bias.buckets(self, positions)
        if self.untie_cls:
            row0, col0 = self.cls_masks(positions.shape[-1], positions.device)
            buckets = torch.where(row0, self.cls_buckets[0], torch.where(col0, self.cls_buckets[1], buckets))
        return buckets

    def relative_bias(self, positions: Tensor) -> Tensor:
        """The relative part alone, (..., H, L, L)."""
        return bucket_bias(self.relative_table.weight, self.relative_buckets(positions))

    def bias(self, positions: Tensor) -> Tensor:
        return self.untied(positions) + self.relative_bias(positions)
