"""Metric names (defined once, used by modules, records, sweeps and compare) and per-length accuracy."""

import math

import torch
from torch import Tensor
from torchmetrics import Metric

TRAIN_LOSS = "train/loss"
LOSS, ACC, ACC_OOD, TOK_ACC, TOK_ACC_OOD = "loss", "acc", "acc_ood", "tok_acc", "tok_acc_ood"
SE = "_se"  # suffix of a metric's standard error over its evaluation set, e.g. "val/acc_se"
ACC_BEST = "val/acc_best"


def name(stage: str, metric: str) -> str:
    """`name("val", "acc")` -> "val/acc"; all logged names go through here."""
    return f"{stage}/{metric}"


def length_name(stage: str, length: int, metric: str = ACC) -> str:
    """Per-length metric name, e.g. "val/acc_len_32" (exact match) or "val/tok_acc_len_32"."""
    return f"{stage}/{metric}_len_{length}"


def goal(metric: str) -> str:
    """ "max" for accuracies, correlations, BLEU; "min" for losses, perplexities and standard errors."""
    last = metric.rsplit("/", 1)[-1]
    lower_is_better = ("loss", "ppl", "mae", "error", SE + "_len_")
    return "min" if last.endswith(SE) or any(key in last for key in lower_is_better) else "max"


def bounds(metric: str) -> tuple[float, float]:
    """The range a metric's values can take, by its name: accuracies, F1 and BLEU in [0, 1], correlations
    in [-1, 1], perplexities >= 1, losses and errors >= 0, anything else unbounded. `cli.py compare`
    clips its intervals to it."""
    short = metric.rsplit("/", 1)[-1]
    if "ppl" in short:
        return 1.0, math.inf
    if any(key in short for key in ("loss", "mae", "error", "examples")):
        return 0.0, math.inf
    if any(key in short for key in ("acc", "f1", "bleu")):
        return 0.0, 1.0
    if any(key in short for key in ("mcc", "pearson", "spearman", "corr")):
        return -1.0, 1.0
    return -math.inf, math.inf


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
