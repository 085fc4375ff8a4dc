import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.init_reference import torch_linear
from lightning_modules.encodings.precision import compute_dtype, fp32_mlp
from lightning_modules.encodings.t5_bias import bucket_bias, distance_score_mod, distances, relative_distance
from pe_core.ranges import PositiveInt


class DynamicBias(PositionalEncoding):
    """Dynamic position bias: an MLP maps the signed distance i - j to one logit bias per head.

    x-transformers' `DynamicPositionBias` (after Wang et al. 2021, CrossFormer), checked against it with
    copied weights: Linear(1, W) -> SiLU, (`depth` - 1) x [Linear(W, W) -> SiLU], Linear(W, H); width W =
    `hidden_dim` (default C / 4, as x-transformers); `log_distance`: the input is sign(x) log(|x| + 1).
    Init: PyTorch's default Linear init (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), as x-transformers, which
    does not re-initialise it.
    Added unscaled, shared by all layers. The MLP runs on every (i, j) pair, so positions need not be
    contiguous. As x-transformers, the MLP runs once per distance (the 2N - 1 distances between the N
    positions of its table, instead of L^2 pairs) and the pairs look their row up. The MLP runs in fp32 whatever
    the compute dtype (bf16 rounds distances past 256), its output cast once (encodings/precision.py).
    Shapes: bias (H, L, L) or (B, H, L, L).
    """

    name = "dynamic_bias"
    init_reference = {
        "mlp.0.weight": torch_linear(1),
        "mlp.0.bias": torch_linear(1),
        **{f"mlp.{i}.{p}": torch_linear(lambda e: e.dim // 4) for i in (2, 4) for p in ("weight", "bias")},
    }
    shift_invariant = True
    flex = True

    def __init__(self, *, depth: PositiveInt = 2, log_distance: bool = False, hidden_dim: PositiveInt | None = None,
                 **common):  # fmt: skip
        super().__init__(**common)
        width = hidden_dim or self.dim // 4
        layers = [nn.Linear(1, width), nn.SiLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.SiLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(width, self.num_heads))
        self.log_distance = log_distance
        # integers: a float table would be rounded by `.to(torch.bfloat16)` (bf16-true)
        self.register_position_table("signed_distances", "signed_distances_table")  # (2N - 1,)

    def signed_distances_table(self, positions: Tensor) -> Tensor:
        """(N,) positions 0..N-1 -> (2N - 1,) every distance i - j between them, from N - 1 down."""
        return -distances(len(positions), positions.device)

    def inputs(self, distance: Tensor) -> Tensor:
        """Integer distances i - j -> the MLP's float input, sign(x) log(|x| + 1) with `log_distance`."""
        x = distance.float()
        return torch.sign(x) * torch.log(x.abs() + 1) if self.log_distance else x

    def bias(self, positions: Tensor) -> Tensor:
        rows = relative_distance(positions) + self.table_length - 1  # (..., L, L) row of i - j
        return bucket_bias(self.distance_table(), rows)  # (..., H, L, L)

    def distance_table(self) -> Tensor:
        """(2N - 1, H) the MLP at every distance i - j, in fp32 (bf16 rounds distances past 256), cast once to
        the compute dtype (encodings/precision.py)."""
        table = fp32_mlp(self.mlp, self.inputs(self.signed_distances)[:, None])
        return table.to(compute_dtype(self.mlp[0].weight))

    def score_mod(self, positions: Tensor):
        return distance_score_mod(self.distance_table(), None, positions, self.table_length - 1)
