from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding


class LearnedAbsolute(PositionalEncoding):
    """Learned absolute position table added to the token embeddings (BERT, GPT-2).

    Devlin et al. 2019; Radford et al. 2019; studied in Wang & Chen 2020 (PE-Study).
    Table (max_length, C), initialised N(0, 0.02^2) as in BERT/GPT-2. Positions >= max_length are
    refused with a clear error (never an index error). Checked against x-transformers'
    `AbsolutePositionalEmbedding` (with its l2norm/scale options off).
    """

    name = "learned"

    def __init__(self, *, dim, num_heads, max_length, causal, init_std: float = 0.02):
        super().__init__(dim=dim, num_heads=num_heads, max_length=max_length, causal=causal)
        self.max_positions = max_length
        self.table = nn.Embedding(max_length, dim)
        nn.init.normal_(self.table.weight, std=init_std)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        self.check_positions(positions)
        return x + self.table(positions)  # (B, L, C) + (L, C) or (B, L, C)

    @property
    def weight(self) -> Tensor:
        """The (max_length, C) table, for the PE-Study probes."""
        return self.table.weight
