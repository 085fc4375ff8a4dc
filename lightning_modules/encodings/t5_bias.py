import math

import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod, position_at
from pe_core.ranges import NonNegativeFloat, PositiveFloat, PositiveInt


def relative_distance(positions: Tensor) -> Tensor:
    """(..., L) positions -> (..., L, L) key minus query distances j - i."""
    return positions[..., None, :] - positions[..., :, None]


def distances(length: int, device=None) -> Tensor:
    """(2 length - 1,) every distance j - i between positions 0..length-1, from -(length - 1) up: the rows of
    a position table over distances, indexed by `relative_distance(positions) + length - 1`."""
    return torch.arange(1 - length, length, device=device)


def bucket_bias(table: Tensor, buckets: Tensor) -> Tensor:
    """(N, H) table and (..., L, L) bucket ids -> (..., H, L, L) table[bucket], i.e.
    `F.embedding(buckets, table).movedim(-1, -3)`, as an index_select on the (H, N) transpose: the same
    values, an (H, L, L) output that is contiguous, and a backward (index_add) about 10x cheaper on CPU than
    the embedding's (which dominated the bias's cost with few buckets and many (i, j) pairs)."""
    heads = table.shape[-1]
    out = table.t().index_select(1, buckets.flatten()).view(heads, *buckets.shape)  # (H, ..., L, L)
    return out.movedim(0, -3)


def distance_score_mod(table: Tensor, rows: Tensor | None, positions: Tensor, offset: int) -> ScoreMod:
    """The score_mod of `bucket_bias(table, rows[relative_distance(positions) + offset])`: adds
    table[rows[j - i + offset], h], a (N, H) table indexed through a position table over distances (`rows`), or
    directly by the distance (rows None: table[j - i + offset, h])."""
    at = position_at(positions)
    if rows is None:
        return lambda score, b, h, i, j: score + table[at(b, j) - at(b, i) + offset, h]
    return lambda score, b, h, i, j: score + table[rows[at(b, j) - at(b, i) + offset], h]


def t5_bucket(relative_position: Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's `_relative_position_bucket` (Raffel et al. 2020), relative_position = j - i.

    Bidirectional: half the buckets per side (+num_buckets/2 when j > i); exact buckets for
    |j - i| < num_buckets/4, logarithmic up to max_distance, clamped. Causal: j >= i -> bucket 0.
    """
    n = -relative_position
    ret = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0).long() * num_buckets
        n = n.abs()
    else:
        n = n.clamp(min=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    scaled = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return ret + torch.where(is_small, n, large)


def untrained_buckets(num_buckets: int, max_distance: int, bidirectional: bool, train_length: int) -> list[int]:
    """The buckets some distance j - i reaches but none between positions 0..train_length-1 does: trained at
    that length, they keep their initial values (e.g. 27-31 of T5's causal 32 buckets with max distance 128 at a
    context of 64)."""
    reachable = t5_bucket(distances(max(max_distance, train_length) + 1), bidirectional, num_buckets, max_distance)
    trained = t5_bucket(distances(train_length), bidirectional, num_buckets, max_distance)
    return sorted(set(reachable.tolist()) - set(trained.tolist()))


def untrained_note(enc: PositionalEncoding, train_length: int) -> str | None:
    """One line naming the T5 buckets of `enc` (num_buckets, max_distance) that training at `train_length`
    positions never reaches, or None when it reaches them all."""
    buckets = untrained_buckets(enc.num_buckets, enc.max_distance, not enc.causal, train_length)
    if not buckets:
        return None
    runs = [[buckets[0], buckets[0]]]
    for b in buckets[1:]:
        if b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    names = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return (
        f"encoding {enc.name!r}: relative buckets {names} (distances >= {train_length} up to "
        f"max_distance={enc.max_distance}) are never reached at the training length {train_length} and keep "
        "their initial values; lower max_distance (or num_buckets) so that training reaches every bucket"
    )


class T5Bias(PositionalEncoding):
    """T5 bucketed relative position bias: one learned scalar per (bucket, head), shared by all layers.

    Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
    Transformer"; bucket function as in PAPERS.md section 2. Added to the logits unscaled.
    Checked against x-transformers' `RelativePositionBias` (scale 1) with the same table.
    `scale`: the table is multiplied by it, sqrt(D) by default as in x-transformers: the same family
    of biases, but Adam moves them sqrt(D) times faster (T5 itself trained with lr 1e-2). `init_std`:
    the table starts N(0, init_std^2); unset, C^-0.5 / scale, so the bias itself starts N(0, 1/C) as T5's
    `relative_attention_bias` (HF transformers' T5 port, `T5PreTrainedModel._init_weights`, factor 1: std
    d_model^-0.5); x-transformers' own default (N(0, 1) times sqrt(D)) is not T5's.
    With `max_distance` beyond the training length, the far buckets are never trained: `untrained_note` says
    which (a warning when a task module starts fitting on data of known training length).
    """

    name = "t5_bias"
    init_reference = {"table.weight": ("normal", lambda e: e.dim**-0.5 / e.scale)}  # bias N(0, 1/C), as T5
    shift_invariant = True
    flex = True

    def __init__(self, *, num_buckets: PositiveInt = 32, max_distance: PositiveInt = 128,
                 init_std: NonNegativeFloat | None = None, scale: PositiveFloat | None = None, **common):  # fmt: skip
        super().__init__(**common)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.scale = self.head_dim**0.5 if scale is None else scale
        self.table = nn.Embedding(num_buckets, self.num_heads)
        nn.init.normal_(self.table.weight, std=self.dim**-0.5 / self.scale if init_std is None else init_std)
        self.register_position_table("distance_buckets", "distance_buckets_table")

    untrained_note = untrained_note

    def distance_buckets_table(self, positions: Tensor) -> Tensor:
        """(N,) positions 0..N-1 -> (2N - 1,) the bucket of every distance j - i between them."""
        return t5_bucket(distances(len(positions), positions.device), not self.causal, self.num_buckets,
                         self.max_distance)  # fmt: skip

    def buckets(self, positions: Tensor) -> Tensor:
        """(..., L) positions -> (..., L, L) bucket ids."""
        return self.distance_buckets[relative_distance(positions) + self.table_length - 1]

    def bias(self, positions: Tensor) -> Tensor:
        return bucket_bias(self.table.weight * self.scale, self.buckets(positions))  # (..., H, L, L)

    def score_mod(self, positions: Tensor) -> ScoreMod:
        return distance_score_mod(self.table.weight * self.scale, self.distance_buckets, positions,
                                  self.table_length - 1)  # fmt: skip
