from typing import Literal

import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.init_reference import BERT
from lightning_modules.position_tables import read_table
from pe_core.errors import ConfigError
from pe_core.ranges import NonNegativeFloat, PositiveFloat, PositiveInt


def load_table(path: str) -> Tensor:
    """A saved (max_len, d') position table: a .pt (one tensor) or .npy file, or the table of a Hugging Face
    GPT-2 / BERT / RoBERTa model folder or hub name (lightning_modules/position_tables.py); float32."""
    return read_table(path, "init_from")


def transfer_table(table: Tensor, rows: int, dim: int, init_rows: str, stride: int, scale: float | None) -> Tensor:
    """PE-Study transfer (Wang & Chen 2020): (max_len, d') -> (rows, dim).

    PCA to `dim` over all saved rows when d' != dim (sklearn, full SVD), then the first `rows` rows or every
    `stride`-th row from 0, standardised over the whole (rows, dim) block (one mean, one std, so the PCA
    geometry is kept), then multiplied by `scale` when given.
    """
    if table.shape[1] < dim or (table.shape[1] > dim and table.shape[0] < dim):
        raise ConfigError(f"init_from: a {tuple(table.shape)} table cannot be reduced by PCA to width {dim}")
    if table.shape[1] != dim:
        from sklearn.decomposition import PCA

        table = torch.from_numpy(PCA(dim, svd_solver="full").fit_transform(table.double().numpy())).float()
    step = stride if init_rows == "every_k" else 1
    needed = (rows - 1) * step + 1
    if table.shape[0] < needed:
        raise ConfigError(f"init_from: {rows} positions with init_rows={init_rows!r} need {needed} saved rows, "
                          f"the file has {table.shape[0]}")  # fmt: skip
    table = table[:needed:step]  # (rows, dim)
    table = (table - table.mean()) / table.std()
    return table if scale is None else table * scale


class LearnedAbsolute(PositionalEncoding):
    """Learned absolute position table added to the token embeddings (BERT, GPT-2).

    Devlin et al. 2019; Radford et al. 2019; studied in Wang & Chen 2020 (PE-Study, PAPERS.md section 1).
    Table (num_positions, C), initialised N(0, init_std^2), 0.02 by default as BERT's `initializer_range`
    (google-research/bert config; HF `BertPreTrainedModel._init_weights`, also HF GPT-2's); with
    `randomize_positions` it has that many rows. Positions beyond it are refused with a clear error (never an
    index error). Checked against x-transformers' `AbsolutePositionalEmbedding` (with its l2norm/scale options off).
    PE-Study transfer: `init_from` a saved (max_len, d') table, a .pt (one tensor) or .npy file, or a Hugging
    Face GPT-2 / BERT / RoBERTa model folder (or hub name, online) whose position table is read; reduced
    by PCA to C when d' != C, rows `init_rows` "first" or "every_k" (every `init_stride`-th: the paper's skip
    setting with 4), standardised, times `init_scale` (0.02 in the paper's LM runs); `freeze` stops its
    gradient. Shapes: x (B, L, C), positions (L,) or (B, L).
    """

    name = "learned"
    init_reference = {"table.weight": BERT}

    def __init__(self, *, init_std: NonNegativeFloat = 0.02, init_from: str | None = None,
                 init_rows: Literal["first", "every_k"] = "first", init_stride: PositiveInt = 4,
                 init_scale: PositiveFloat | None = None, freeze: bool = False, **common):  # fmt: skip
        super().__init__(**common)
        self.max_positions = self.num_positions
        self.table = nn.Embedding(self.num_positions, self.dim)
        nn.init.normal_(self.table.weight, std=init_std)
        if init_from is not None:
            table = transfer_table(
                load_table(init_from), self.num_positions, self.dim, init_rows, init_stride, init_scale
            )
            with torch.no_grad():
                self.table.weight.copy_(table)
        self.table.weight.requires_grad_(not freeze)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(positions)  # (B, L, C) + (L, C) or (B, L, C)

    @property
    def weight(self) -> Tensor:
        """The (num_positions, C) table, for the PE-Study probes."""
        return self.table.weight
