import torch
from torch import Tensor, nn

from errors import ConfigError
from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.t5_bias import bucket_bias, distance_score_mod, distances, relative_distance


class DynamicBias(PositionalEncoding):
    """Dynamic position bias: an MLP maps the signed distance i - j to one logit bias per head.

    x-transformers' `DynamicPositionBias` (after Wang et al. 2021, CrossFormer), checked against it with
    copied weights: Linear(1, W) -> SiLU, (`depth` - 1) x [Linear(W, W) -> SiLU], Linear(W, H); width W =
    `hidden_dim` (default C / 4, as x-transformers); `log_distance`: the input is sign(x) log(|x| + 1).
    Init: PyTorch's default Linear init (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), as x-transformers, which
    does not re-initialise it.
    Added unscaled, shared by all layers. The MLP runs on every (i, j) pair, so positions need not be
    contiguous. As x-transformers, the MLP runs once per distance (the 2N - 1 distances between the N
    positions of its table, instead of L^2 pairs) and the pairs look their row up.
    Shapes: bias (H, L, L) or (B, H, L, L).
    """

    name = "dynamic_bias"
    shift_invariant = True
    flex = True

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
        self.register_position_table("distance_inputs", "distance_inputs_table")  # (2N - 1, 1)

    def distance_inputs_table(self, positions: Tensor) -> Tensor:
        """(N,) positions 0..N-1 -> (2N - 1, 1) the MLP input of every distance i - j, from N - 1 down."""
        return self.inputs(-distances(len(positions), positions.device))[:, None]

    def inputs(self, distance: Tensor) -> Tensor:
        """Integer distances i - j -> the MLP's float input, sign(x) log(|x| + 1) with `log_distance`."""
        x = distance.float()
        return torch.sign(x) * torch.log(x.abs() + 1) if self.log_distance else x

    def bias(self, positions: Tensor) -> Tensor:
        rows = relative_distance(positions) + self.table_length - 1  # (..., L, L) row of i - j
        return bucket_bias(self.mlp(self.distance_inputs), rows)  # (..., H, L, L)

    def score_mod(self, positions: Tensor):
        return distance_score_mod(self.mlp(self.distance_inputs), None, positions, self.table_length - 1)
