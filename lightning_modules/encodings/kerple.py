import torch
from torch import Tensor, nn

from lightning_modules.encodings.base import PositionalEncoding, ScoreMod, position_at
from lightning_modules.encodings.t5_bias import relative_distance


def abs_distance(positions: Tensor) -> Tensor:
    """(..., L) positions -> (..., 1, L, L) float |i - j|."""
    return relative_distance(positions).abs().unsqueeze(-3).float()


class KerpleLog(PositionalEncoding):
    """KERPLE, logarithmic kernel: logit bias -r1_h * log(1 + r2_h |i - j|), learned r1, r2 > 0 per head.

    Chi et al., NeurIPS 2022, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation".
    Init as the official code (github.com/chijames/KERPLE, megatron/mpu/layers.py, `ParallelKerpleLog`:
    `bias_p` = r1 ~ U(0, 2), `bias_a` = r2 ~ U(0, 1)), kept positive by clamping the parameters themselves
    to >= 0.01 before every use (in place on `.data`, like that code, so an update that overshoots is reset
    rather than stuck behind a zero-gradient clamp); the power kernel has its own init (see `KerplePower`)
    and also clamps r2 <= 2, the paper's range (0, 2]. Causal: |i - j| =
    i - j under the mask (the paper); bidirectional: the symmetric |i - j|. Shared by all layers; parameters
    of shape (H,), so AdamW does not decay them. Checked against the closed form.
    Shapes: r1, r2 (H,); bias (H, L, L) or (B, H, L, L).
    """

    name = "kerple_log"
    init_reference = {"r1": ("uniform", 0.0, 2.0), "r2": ("uniform", 0.0, 1.0)}  # official ParallelKerpleLog
    shift_invariant = True
    flex = True
    eps = 1e-2
    r2_max: float | None = None
    init_ranges = (2.0, 1.0)  # r1 ~ U(0, 2), r2 ~ U(0, 1)

    def __init__(self, **common):
        super().__init__(**common)
        r1_high, r2_high = self.init_ranges
        self.r1 = nn.Parameter(r1_high * torch.rand(self.num_heads))  # (H,)
        self.r2 = nn.Parameter(r2_high * torch.rand(self.num_heads))  # (H,)

    def kernel(self, distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        return -r1 * torch.log1p(r2 * distance)

    def clamp_(self) -> None:
        self.r1.data.clamp_(min=self.eps)
        self.r2.data.clamp_(min=self.eps, max=self.r2_max)

    def bias(self, positions: Tensor) -> Tensor:
        self.clamp_()
        distance = abs_distance(positions)  # (..., 1, L, L)
        return self.kernel(distance, self.r1[:, None, None], self.r2[:, None, None])  # (..., H, L, L)

    def score_mod(self, positions: Tensor) -> ScoreMod:
        self.clamp_()
        at, r1, r2 = position_at(positions), self.r1, self.r2
        return lambda score, b, h, i, j: score + self.kernel((at(b, j) - at(b, i)).abs().float(), r1[h], r2[h])


class KerplePower(KerpleLog):
    """KERPLE, power kernel: logit bias -r1_h * |i - j|^r2_h with r1 > 0 and 0 < r2 <= 2 (Chi et al. 2022).

    Init as the official code (github.com/chijames/KERPLE, `ParallelKerplePower`): the coefficient
    `bias_a` = r1 ~ U(0, 1), the exponent `bias_p` = r2 ~ U(0, 2) (the log kernel's ranges swapped);
    everything else as `KerpleLog`.
    """

    name = "kerple_power"
    init_reference = {"r1": ("uniform", 0.0, 1.0), "r2": ("uniform", 0.0, 2.0)}  # ParallelKerplePower
    r2_max = 2.0
    init_ranges = (1.0, 2.0)  # r1 ~ U(0, 1), r2 ~ U(0, 2)

    def kernel(self, distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        return -r1 * distance.pow(r2)
