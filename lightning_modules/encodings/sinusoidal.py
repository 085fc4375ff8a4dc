import torch
from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding
from pe_core.errors import ConfigError
from pe_core.ranges import AboveOne


def sinusoid_table(positions: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = base^(-2i/d); (...,) -> (..., dim)."""
    inv_freq = base ** (-torch.arange(0, dim, 2, device=positions.device).float() / dim)
    angles = positions.float()[..., None] * inv_freq  # (..., dim/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (..., dim) interleaved


class Sinusoidal(PositionalEncoding):
    """Fixed sinusoidal absolute encoding added to the token embeddings.

    Vaswani et al. 2017, "Attention Is All You Need", as defined in PAPERS.md section 1 (interleaved
    sin/cos, w_i = 10000^(-2i/d), the table itself unscaled). No parameters; serves any length.
    `scale_tokens`: multiply the token embeddings by sqrt(C) before adding the table, as Vaswani et al.
    do (section 3.4); off by default, so N(0, 0.02) token embeddings meet amplitude-1 sinusoids, which
    slows early training (the reverse and Multi30k numbers of docs/single-runs.md show it).
    """

    name = "sinusoidal"
    init_reference = {}
    float_positions = True

    def __init__(self, *, base: AboveOne = 10000.0, scale_tokens: bool = False, **common):
        super().__init__(**common)
        if self.dim % 2:
            raise ConfigError(f"{self.name} needs an even dim, got dim={self.dim}")
        self.base, self.token_scale = base, self.dim**0.5 if scale_tokens else 1.0
        self.register_position_table("sinusoid", "sinusoid_table")  # (N, C)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x * self.token_scale + self.table(positions).to(x.dtype)

    def table(self, positions: Tensor) -> Tensor:
        """(..., L) positions -> (..., L, C) sinusoids: rows of the `sinusoid` position table (computed for
        float positions, `continuous_positions`)."""
        if positions.is_floating_point():
            return self.sinusoid_table(positions).to(self.sinusoid.dtype)
        return self.sinusoid[positions]

    def sinusoid_table(self, positions: Tensor) -> Tensor:
        return sinusoid_table(positions, self.dim, self.base)

    @property
    def weight(self) -> Tensor:
        """The (max_length, C) table, for the PE-Study probes."""
        return sinusoid_table(torch.arange(self.max_length), self.dim, self.base)
