import math

import torch
from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod, position_at
from lightning_modules.encodings.t5_bias import relative_distance
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveInt


def alibi_slopes(num_heads: int) -> list[float]:
    """Geometric slopes 2^(-8/H), 2^(-16/H), ...; for H not a power of two, the paper's recipe:
    the slopes of the closest smaller power of two, then every other slope of the next one."""

    def power_of_2(n: int) -> list[float]:
        return [2 ** (-8 * (i + 1) / n) for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_2(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_2(closest) + power_of_2(2 * closest)[0::2][: num_heads - closest]


class ALiBi(PositionalEncoding):
    """Attention with Linear Biases: logit bias -m_h |i - j| with fixed geometric per-head slopes.

    Press et al., ICLR 2022, "Train Short, Test Long". Causal: -m (i - j) for j <= i (the paper);
    bidirectional: the symmetric form -m |i - j|, which equals the causal one under the causal mask.
    No parameters. Checked against x-transformers' `AlibiPositionalBias`. `heads` k < H: ALiBi on the first k
    heads only, with the slopes of k heads, the other heads position-free (x-transformers' `alibi_num_heads`).
    """

    name = "alibi"
    init_reference = {}
    shift_invariant = True
    float_positions = True
    flex = True

    def __init__(self, *, heads: PositiveInt | None = None, **common):
        super().__init__(**common)
        self.heads = self.num_heads if heads is None else heads
        if not 1 <= self.heads <= self.num_heads:
            raise ConfigError(f"alibi heads must be in [1, num_heads={self.num_heads}], got {heads}")
        slopes = torch.tensor(alibi_slopes(self.heads) + [0.0] * (self.num_heads - self.heads))
        self.register_buffer("slopes", slopes[:, None, None], persistent=False)  # (H, 1, 1)

    def bias(self, positions: Tensor) -> Tensor:
        distance = relative_distance(positions).abs().unsqueeze(-3).float()  # (..., 1, L, L)
        return -self.slopes * distance  # (..., H, L, L)

    def score_mod(self, positions: Tensor) -> ScoreMod:
        at, slopes = position_at(positions), self.slopes.flatten()  # (H,)
        return lambda score, b, h, i, j: score - slopes[h] * (at(b, j) - at(b, i)).abs()
