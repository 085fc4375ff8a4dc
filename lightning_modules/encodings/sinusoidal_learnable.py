import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.sinusoidal import sinusoid_table
from pe_core.errors import ConfigError
from pe_core.ranges import AboveOne


class SinusoidalLearnable(PositionalEncoding):
    """A trainable absolute table initialised with the sinusoid, added to the token embeddings.

    The "learned, sinusoid-initialised" embedding of Wang & Chen 2020 (PE-Study) and of the sinusoid-init
    ablations since Vaswani et al. 2017: `sinusoid_table` (interleaved sin/cos, w_i = base^(-2i/C)) as the
    initial (num_positions, C) table, then free parameters. Checked against the closed form at init.
    Positions beyond the table are refused with a clear error. Shapes: x (B, L, C), positions (L,) or (B, L).
    """

    name = "sinusoidal_learnable"
    init_reference = {"table": ("exact", lambda e: sinusoid_table(torch.arange(e.num_positions), e.dim, 1e4))}

    def __init__(self, *, base: AboveOne = 10000.0, **common):
        super().__init__(**common)
        if self.dim % 2:
            raise ConfigError(f"{self.name} needs an even dim, got dim={self.dim}")
        self.max_positions = self.num_positions
        self.table = nn.Parameter(sinusoid_table(torch.arange(self.num_positions), self.dim, base))  # (N, C)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table[positions].to(x.dtype)  # (B, L, C) + (L, C) or (B, L, C)

    @property
    def weight(self) -> Tensor:
        """The (num_positions, C) table, for the PE-Study probes."""
        return self.table
