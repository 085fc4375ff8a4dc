import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod, position_at
from lightning_modules.encodings.init_reference import BERT, ONES, ZEROS
from lightning_modules.encodings.t5_bias import distances, relative_distance
from pe_core.errors import ConfigError
from pe_core.ranges import NonNegativeInt, PositiveInt


def log_bucket_position(relative: Tensor, bucket_size: int, max_position: int) -> Tensor:
    """DeBERTa-v2's `make_log_bucket_position` (float32 as the original): relative positions with |r| <= mid
    (mid = bucket_size / 2) kept, larger ones mapped to sign(r) * (mid + ceil(log(|r|/mid) / log((max_position
    - 1)/mid) * (mid - 1))), so |r| = max_position - 1 lands on bucket_size - 1."""
    sign = torch.sign(relative)
    mid = bucket_size // 2
    abs_pos = torch.where((relative < mid) & (relative > -mid), mid - 1, relative.abs())
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1))
    return torch.where(abs_pos <= mid, relative, ((log_pos + mid) * sign).long())


class DeBERTa(PositionalEncoding):
    """DeBERTa disentangled attention: content-to-position and position-to-content logit terms.

    He et al., ICLR 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", with v2/v3's log
    buckets (`position_buckets`, `max_relative_positions`; buckets <= 0: v1's plain clip at
    max_relative_positions). Logits = (q_i.k_j + q_i.Kr_d + k_j.Qr_d) / sqrt(3D), d = bucket(i - j) + S
    clipped to [0, 2S), S the bucket count: index, gathers and the p2c transpose as the official code (which
    indexes p2c by i - j too, where the paper writes delta(j, i)). Kr, Qr = projections of LayerNorm(a
    (2S, C) relative table), as v2/v3; our choice: the encoding owns ONE pair of position projections
    shared by all layers (DeBERTa has them per layer, v2/v3 reuse each layer's content W^Q, W^K). Relative
    only (position_biased_input off, as v2/v3; no enhanced mask decoder). Init as the official code's
    `init_weights` (microsoft/DeBERTa, `initializer_range` 0.02): table and projection weights N(0, 0.02),
    biases 0, LayerNorm 1 / 0. Checked
    against a written-out copy of the official `disentangled_attention_bias`.
    Shapes: q, k (B, H, L, D); Kr, Qr (H, 2S, D); content_bias (B, H, L, L).
    """

    name = "deberta"
    init_reference = {"table.weight": BERT, "norm.weight": ONES, "norm.bias": ZEROS, "pos_key.weight": BERT,
                      "pos_key.bias": ZEROS, "pos_query.weight": BERT, "pos_query.bias": ZEROS}  # fmt: skip
    shift_invariant = True
    flex = True

    def __init__(self, *, position_buckets: NonNegativeInt = 256, max_relative_positions: PositiveInt = 512, **common):
        super().__init__(**common)
        if position_buckets > 0 and max_relative_positions <= position_buckets // 2 + 1:
            raise ConfigError(f"deberta needs max_relative_positions > position_buckets / 2 + 1, got "
                              f"{max_relative_positions} and {position_buckets}")  # fmt: skip
        self.position_buckets, self.max_relative_positions = position_buckets, max_relative_positions
        self.span = position_buckets if position_buckets > 0 else max_relative_positions  # S
        self.table = nn.Embedding(2 * self.span, self.dim)  # relative embeddings, (2S, C)
        self.norm = nn.LayerNorm(self.dim)
        self.pos_key, self.pos_query = nn.Linear(self.dim, self.dim), nn.Linear(self.dim, self.dim)
        for module in (self.table, self.pos_key, self.pos_query):
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
        self.register_position_table("distance_rows", "distance_rows_table")

    def attention_scale(self) -> float:
        return (3 * self.head_dim) ** -0.5

    def distance_rows_table(self, positions: Tensor) -> Tensor:
        """(N,) positions 0..N-1 -> (2N - 1,) the table row bucket(i - j) + S, clipped to [0, 2S), of every
        distance j - i between them."""
        relative = -distances(len(positions), positions.device)  # i - j
        if self.position_buckets > 0:
            relative = log_bucket_position(relative, self.position_buckets, self.max_relative_positions)
        return (relative + self.span).clamp(0, 2 * self.span - 1)

    def relative_index(self, positions: Tensor) -> Tensor:
        """(..., L) positions -> (..., L, L) table rows bucket(i - j) + S, clipped to [0, 2S)."""
        return self.distance_rows[relative_distance(positions) + self.table_length - 1]

    def reserve(self, length: int) -> None:
        """The Transformer reserves the positions of every forward before calling the hooks: all of them are
        below `length`, so their distances lie within +-(length - 1) (what `used_rows` bounds them by)."""
        super().reserve(length)
        self.positions_below = length

    def used_rows(self, positions: Tensor) -> tuple[Tensor, int, int]:
        """`relative_index` shifted to the first table row it uses, and rows [lo, hi) covering it: only those
        need the LayerNorm and the projections, and the c2p / p2c products and gathers shrink to them (at
        L = 256 with the defaults, 385 of 512 rows; at L = 32, 63). For 1-D positions, all below the last
        `reserve` (or the table's length), the range is that of the distances +-(bound - 1), computed on the host
        from the bound alone: no host sync (reading the index's range was two per layer). Other positions keep
        all 2S rows. Rows are monotone in the distance, so a position beyond the bound (a hook called
        directly, without `reserve`) makes the gathers fail loudly, never read a wrong row."""
        index = self.relative_index(positions)
        if positions.dim() != 1 or positions.is_meta:
            return index, 0, 2 * self.span
        bound = getattr(self, "positions_below", self.table_length)
        lo, hi = self.row_range(bound if len(positions) <= bound else self.table_length)
        return index - lo, lo, hi

    def row_range(self, bound: int) -> tuple[int, int]:
        """Table rows [lo, hi) of the distances between positions below `bound` (<= the table's length): the
        rows of the two extreme distances, read from a host copy of `distance_rows` (built on the CPU once
        per table length)."""
        if len(getattr(self, "host_rows", ())) != 2 * self.table_length - 1:
            self.host_rows = self.distance_rows_table(torch.arange(self.table_length)).tolist()
        centre = self.table_length - 1
        ends = self.host_rows[centre - bound + 1], self.host_rows[centre + bound - 1]
        return min(ends), max(ends) + 1

    def content_bias(self, q: Tensor, k: Tensor, positions: Tensor) -> Tensor:
        if torch.compiler.is_compiling():  # the used rows have a data-dependent count: all of them
            index, lo, hi = self.relative_index(positions), 0, 2 * self.span
        else:
            index, lo, hi = self.used_rows(positions)
        r = self.norm(self.table.weight[lo:hi])  # (rows used, C), rows are normalised one by one
        pos_k = self.pos_key(r).unflatten(-1, (self.num_heads, self.head_dim)).transpose(0, 1)  # (H, rows, D)
        pos_q = self.pos_query(r).unflatten(-1, (self.num_heads, self.head_dim)).transpose(0, 1)  # (H, rows, D)
        index = index.unsqueeze(-3).expand(*q.shape[:-1], k.shape[-2])  # (B, H, L, L)
        c2p = (q @ pos_k.transpose(-1, -2)).gather(-1, index)  # q_i . Kr[d(i, j)]
        p2c = (k @ pos_q.transpose(-1, -2)).gather(-1, index.transpose(-1, -2)).transpose(-1, -2)  # k_j . Qr[d(i, j)]
        return (c2p + p2c) * self.attention_scale()

    def content_score_mod(self, q: Tensor, k: Tensor, positions: Tensor) -> ScoreMod:
        """c2p and p2c over all 2S table rows, looked up per (i, j) as `content_bias`: q_i . Kr[d] + k_j . Qr[d]."""
        r = self.norm(self.table.weight)  # (2S, C)
        pos_k = self.pos_key(r).unflatten(-1, (self.num_heads, self.head_dim)).transpose(0, 1)  # (H, 2S, D)
        pos_q = self.pos_query(r).unflatten(-1, (self.num_heads, self.head_dim)).transpose(0, 1)  # (H, 2S, D)
        scale = self.attention_scale()
        c2p, p2c = q @ pos_k.transpose(-1, -2) * scale, k @ pos_q.transpose(-1, -2) * scale  # (B, H, L, 2S)
        at, rows, offset = position_at(positions), self.distance_rows, self.table_length - 1

        def mod(score, b, h, i, j):
            row = rows[at(b, j) - at(b, i) + offset]
            return score + c2p[b, h, i, row] + p2c[b, h, j, row]

        return mod
