import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding
from lightning_modules.encodings.t5_bias import relative_distance
from lightning_modules.errors import ConfigError


class DynamicBias(PositionalEncoding):
    """Dynamic position bias: an MLP maps the signed distance i - j to one logit bias per head.

    x-transformers' `DynamicPositionBias` (after Wang et al. 2021, CrossFormer), checked against it with
    copied weights: Linear(1, W) -> SiLU, (`depth` - 1) x [Linear(W, W) -> SiLU], Linear(W, H); width W =
    `hidden_dim` (default C / 4, as x-transformers); `log_distance`: the input is sign(x) log(|x| + 1).
    Added unscaled, shared by all layers. The MLP runs on every (i, j) pair, so positions need not be
    contiguous: activations (..., L, L, W). Shapes: bias (H, L, L) or (B, H, L, L).
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

    def bias(self, positions: Tensor) -> Tensor:
        x = -relative_distance(positions).float()  # (..., L, L) query minus key, i - j
        if self.log_distance:
            x = torch.sign(x) * torch.log(x.abs() + 1)
        return self.mlp(x[..., None]).movedim(-1, -3)  # (..., H, L, L)
