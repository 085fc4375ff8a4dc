import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.t5_bias import bucket_bias, relative_distance
from lightning_modules.errors import ConfigError


class DynamicBias(PositionalEncoding):
    """Dynamic position bias: an MLP maps the signed distance i - j to one logit bias per head.

    x-transformers' `DynamicPositionBias` (after Wang et al. 2021, CrossFormer), checked against it with
    copied weights: Linear(1, W) -> SiLU, (`depth` - 1) x [Linear(W, W) -> SiLU], Linear(W, H); width W =
    `hidden_dim` (default C / 4, as x-transformers); `log_distance`: the input is sign(x) log(|x| + 1).
    Init: PyTorch's default Linear init (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), as x-transformers, which
    does not re-initialise it.
    Added unscaled, shared by all layers. The MLP runs on every (i, j) pair, so positions need not be
    contiguous. As x-transformers, the MLP runs once per distinct distance (at most 2L - 1 rows for 0..L-1,
    instead of L^2 pairs) and the pairs look their row up; the distinct distances and each pair's row
    depend on positions only, so the default positions' are built once per length.
    Shapes: bias (H, L, L) or (B, H, L, L).
    """

    name = "dynamic_bias"
    shift_invariant = True

    def __init__(self, *, depth: int = 2, log_distance: bool = False, hidden_dim: int | None = None, **common):
        super().__init__(**common)
        if depth < 1:
            raise ConfigError(f"dynamic_bias needs depth >= 1, got {depth}")
        width = hidden_dim or self.dim // 4
        layers = [nn.Linear(1, width), nn.SiLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.SiLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(width, self.num_heads))
        self.log_distance = log_distance

    def inputs(self, distance: Tensor) -> Tensor:
        """Integer distances i - j -> the MLP's float input, sign(x) log(|x| + 1) with `log_distance`."""
        x = distance.float()
        return torch.sign(x) * torch.log(x.abs() + 1) if self.log_distance else x

    def bias(self, positions: Tensor) -> Tensor:
        if torch.compiler.is_compiling() or positions.is_meta:  # the distinct distances are data: every pair
            return self.mlp(self.inputs(-relative_distance(positions))[..., None]).movedim(-1, -3)
        distances, rows = self.cached("distances", positions, distinct_distances)  # (N,), (..., L, L)
        return bucket_bias(self.mlp(self.inputs(distances)[:, None]), rows)  # (..., H, L, L)


def distinct_distances(positions: Tensor) -> tuple[Tensor, Tensor]:
    """(..., L) positions -> the distances i - j as a table (N,) and each pair's row in it (..., L, L):
    every integer from the smallest to the largest distance (2L - 1 rows for contiguous positions), or
    the distinct ones when that range would have more rows than there are pairs."""
    distance = -relative_distance(positions)  # (..., L, L) query minus key, i - j
    low, high = int(distance.min()), int(distance.max())
    if high - low + 1 > distance.numel():
        return torch.unique(distance, return_inverse=True)
    return torch.arange(low, high + 1, device=positions.device), distance - low
