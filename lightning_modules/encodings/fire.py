import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod, position_at
from lightning_modules.encodings.init_reference import ONES, torch_linear
from lightning_modules.encodings.precision import compute_dtype, fp32_mlp
from pe_core.ranges import PositiveFloat, PositiveInt


class FIRE(PositionalEncoding):
    """FIRE: logit bias f(psi(i - j) / psi(max(i, L_thr))) with psi(x) = log(c x + 1), f an MLP per head.

    Li et al. 2023 (arXiv 2310.04418), "Functional Interpolation for Relative Positions Improves Long Context
    Transformers". As the reference PyTorch implementation: f = Linear(1, `mlp_width`) -> ReLU ->
    Linear(`mlp_width`, H); learned c (init `init_c` 0.1, used as |c x|) and threshold
    L_thr = |multiplier * `init_threshold`| (a learned multiplier, init 1, times a frozen 512), eps 1e-6
    added to the normaliser; the MLP keeps PyTorch's default Linear init, as that code (weights and biases
    U(-1/sqrt(fan_in), 1/sqrt(fan_in))). i is the query's position, so the bias depends on where the query sits
    (not shift-invariant once i > L_thr). Causal: i - j >= 0 under the mask (the paper); bidirectional: the
    same formula on |i - j| (our choice). One MLP shared by all layers.
    Computed in fp32 whatever the compute dtype, cast once (encodings/precision.py). Checked against the closed
    form with a hand-set MLP. Shapes: bias (H, L, L) or (B, H, L, L).
    """

    name = "fire"
    # the MLP: PyTorch's default Linear init, of fan-in 1 and the default mlp_width 32
    init_reference = {"c": ("const", 0.1), "threshold_multiplier": ONES, "mlp.0.weight": torch_linear(1),
                      "mlp.0.bias": torch_linear(1), "mlp.2.weight": torch_linear(32),
                      "mlp.2.bias": torch_linear(32)}  # fmt: skip
    flex = True

    def __init__(self, *, mlp_width: PositiveInt = 32, init_c: PositiveFloat = 0.1,
                 init_threshold: PositiveFloat = 512.0, eps: PositiveFloat = 1e-6, **common):  # fmt: skip
        super().__init__(**common)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, self.num_heads))
        self.c = nn.Parameter(torch.tensor(init_c))
        self.init_threshold = nn.Parameter(torch.tensor(init_threshold), requires_grad=False)
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))
        self.eps = eps

    def psi(self, x: Tensor) -> Tensor:
        return torch.log(torch.abs(self.c.float() * x) + 1)

    @staticmethod
    def distance(positions: Tensor) -> tuple[Tensor, Tensor]:
        """(..., L) positions -> float positions and (..., L, L) |i - j| (parameter-free)."""
        pos = positions.float()
        return pos, (pos[..., :, None] - pos[..., None, :]).abs()

    def normalized_distance(self, positions: Tensor) -> Tensor:
        """(..., L) positions -> (..., L, L) psi(|i - j|) / psi(max(i, L_thr)), i the query position."""
        pos, distance = self.distance(positions)
        threshold = torch.abs(self.threshold_multiplier.float() * self.init_threshold.float())
        normalizer = torch.maximum(pos, threshold)[..., :, None]  # (..., L, 1)
        return self.psi(distance) / (self.psi(normalizer) + self.eps)

    def bias(self, positions: Tensor) -> Tensor:
        # in fp32 (bf16 keeps about 100 distinct inputs of 1024), cast once to the compute dtype
        bias = fp32_mlp(self.mlp, self.normalized_distance(positions)[..., None])  # (..., L, L, H)
        return bias.to(compute_dtype(self.c)).movedim(-1, -3)  # (..., H, L, L)

    def score_mod(self, positions: Tensor) -> ScoreMod:
        """The MLP written out per (i, j) score, unrolled over its width (pointwise, so it fuses)."""
        at, (w1, b1), (w2, b2) = position_at(positions), self.mlp[0].parameters(), self.mlp[2].parameters()
        threshold = torch.abs(self.threshold_multiplier * self.init_threshold)

        def mod(score, b, h, i, j):
            query = at(b, i).float()
            x = self.psi((query - at(b, j).float()).abs()) / (self.psi(torch.maximum(query, threshold)) + self.eps)
            out = score + b2[h]
            for w in range(w1.shape[0]):
                out = out + w2[h, w] * torch.relu(w1[w, 0] * x + b1[w])
            return out

        return mod
