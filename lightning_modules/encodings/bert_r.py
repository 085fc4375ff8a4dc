from torch import Tensor, nn

from lightning_modules.encodings.init_reference import BERT
from lightning_modules.encodings.learned import LearnedAbsolute
from lightning_modules.encodings.t5_bias import T5Bias, bucket_bias, distance_score_mod
from lightning_modules.encodings.tupe import bert_init
from pe_core.ranges import PositiveInt


class BertR(LearnedAbsolute):
    """BERT-R: a learned absolute table added to the input plus a T5 relative bias per head, unscaled.

    The baseline "BERT-R" of Ke, He & Liu, ICLR 2021 (TUPE, PAPERS.md section 2, GLUE avg 83.66): BERT's
    absolute embedding (as `learned`, all of its options) and the relative term of TUPE-R, i.e. T5's
    buckets (32, max distance 128) into a (buckets, heads) table shared by all layers and added to the
    logits unscaled, with no [CLS] reset (that belongs to TUPE). `positional_logits` is the relative term.
    Init: both tables N(0, 0.02), as the official TUPE code's `init_bert_params` (github.com/guolinke/TUPE,
    `--rel-pos` without TUPE's untied term is this baseline).
    """

    name = "bert_r"
    init_reference = {"table.weight": BERT, "relative_table.weight": BERT}
    flex = True

    def __init__(self, *, num_buckets: PositiveInt = 32, max_distance: PositiveInt = 128, **kwargs):
        super().__init__(**kwargs)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.relative_table = nn.Embedding(num_buckets, self.num_heads)
        bert_init(self.relative_table)
        self.register_position_table("distance_buckets", "distance_buckets_table")

    distance_buckets_table = T5Bias.distance_buckets_table
    untrained_note = T5Bias.untrained_note
    buckets = T5Bias.buckets

    def bias(self, positions: Tensor) -> Tensor:
        return bucket_bias(self.relative_table.weight, self.buckets(positions))  # (..., H, L, L)

    def score_mod(self, positions: Tensor):
        return distance_score_mod(self.relative_table.weight, self.distance_buckets, positions, self.table_length - 1)
