"""Per-length accuracy and the evaluation summaries; metric names live in metric_names.py (re-exported here)."""

import math

import torch
from torch import Tensor
from torchmetrics import Metric

from lightning_modules.metric_names import (  # noqa: F401 (re-exported)
    ACC,
    ACC_BEST,
    ACC_OOD,
    LOSS,
    SE,
    TOK_ACC,
    TOK_ACC_OOD,
    TRAIN_LOSS,
    bounds,
    goal,
    length_name,
    name,
)


class PerLengthAccuracy(Metric):
    """Exact-match and token accuracy per task length, summed across devices (DDP-safe).

    update(preds (B, L), targets (B, L) with -100 where unsupervised, lengths (B,)). An example is an
    exact match when every supervised token is right (teacher-forced, which for argmax equals greedy
    decoding's exact match).
    """

    full_state_update = False

    def __init__(self, max_length: int):
        super().__init__()
        for state in ("exact", "examples", "tokens_right", "tokens"):
            self.add_state(state, default=torch.zeros(max_length + 1, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Tensor, targets: Tensor, lengths: Tensor) -> None:
        supervised = targets != -100
        right = (preds == targets) & supervised  # (B, L)
        exact = (right.sum(1) == supervised.sum(1)).long()  # (B,)
        self.exact.index_add_(0, lengths, exact)
        self.examples.index_add_(0, lengths, torch.ones_like(exact))
        self.tokens_right.index_add_(0, lengths, right.sum(1))
        self.tokens.index_add_(0, lengths, supervised.sum(1))

    def examples_per_length(self) -> dict[int, int]:
        """{length: examples evaluated}, summed across devices."""
        with self.sync_context():
            return {n: int(self.examples[n]) for n in self.examples.nonzero().flatten().tolist()}

    def compute(self) -> dict[int, tuple[float, float]]:
        """{length: (exact-match accuracy, token accuracy)} for every length seen."""
        seen = self.examples.nonzero().flatten().tolist()
        return {
            n: (
                self.exact[n].item() / self.examples[n].item(),
                self.tokens_right[n].item() / self.tokens[n].item(),
            )
            for n in seen
        }


def summarise(per_length: dict[int, tuple[float, float]], stage: str, train_max_len: int) -> dict[str, float]:
    """Per-length values plus in-distribution (<= train_max_len) and beyond-length means, by name."""
    out = {}
    for n, (exact, token) in per_length.items():
        out[length_name(stage, n)] = exact
        out[length_name(stage, n, TOK_ACC)] = token
    for metric, column in ((ACC, 0), (TOK_ACC, 1)):
        inside = [v[column] for n, v in per_length.items() if n <= train_max_len]
        beyond = [v[column] for n, v in per_length.items() if n > train_max_len]
        if inside:
            out[name(stage, metric)] = sum(inside) / len(inside)
        if beyond:
            out[name(stage, metric + "_ood")] = sum(beyond) / len(beyond)
    return out


def binomial_se(p: float, n: int) -> float:
    """Standard error of an accuracy p measured on n independent examples, sqrt(p (1 - p) / n)."""
    return math.sqrt(p * (1 - p) / n)


def standard_errors(per_length: dict[int, tuple[float, float]], examples: dict[int, int], stage: str,
                    train_max_len: int) -> dict[str, float]:  # fmt: skip
    """The evaluation set's own sampling error of the exact-match accuracies: per length
    (`val/acc_se_len_<n>`, binomial) and of the in-distribution and beyond means (`val/acc_se`,
    `val/acc_ood_se`: sqrt(sum over the K lengths of se_n^2) / K, the lengths being independent samples).
    Plug-in estimates: a length scored all right or all wrong has se 0."""
    out, inside, beyond = {}, [], []
    for n, (exact, _) in per_length.items():
        se = binomial_se(exact, examples[n])
        out[length_name(stage, n, ACC + SE)] = se
        (inside if n <= train_max_len else beyond).append(se)
    for metric, ses in ((ACC, inside), (ACC_OOD, beyond)):
        if ses:
            out[name(stage, metric + SE)] = math.sqrt(sum(se * se for se in ses)) / len(ses)
    return out
