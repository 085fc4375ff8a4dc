"""Metric names, goals and ranges, defined once (used by modules, records, sweeps and compare); no torch, so
`cli.py compare` reads records without importing it."""

import math
import re

TRAIN_LOSS = "train/loss"
LOSS, ACC, ACC_OOD, TOK_ACC, TOK_ACC_OOD = "loss", "acc", "acc_ood", "tok_acc", "tok_acc_ood"
SE = "_se"  # suffix of a metric's standard error over its evaluation set, e.g. "val/acc_se"
ACC_BEST = "val/acc_best"
STAGE_METRIC = re.compile(r"^(train|val|test)/")  # a logged metric (not a config value or system stat)
BEST = "best/"  # a W&B run's summary key for a validation metric's best value: `best/val/acc`
PER_LENGTH = re.compile(r"_(len|ctx)_\d+")  # one value per length or context (val/acc_len_8, val/ppl_ctx_128)


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


def is_diagnostic(metric: str) -> bool:
    """A value that describes the evaluation rather than how good the model is: a standard error (`val/acc_se`,
    `val/acc_se_len_8`) or an example count (`val/examples`). W&B hides it from the automatic panels, and no
    "best" is shown for it (its minimum over validations means nothing)."""
    last = metric.rsplit("/", 1)[-1]
    return last.endswith(SE) or SE + "_len_" in last or "examples" in last


def has_best(metric: str) -> bool:
    """Whether a metric's best value over the validations of a run is worth showing: not a diagnostic value
    (`is_diagnostic`), not the learning rate, not a metric that already is a best so far (`val/acc_best`)."""
    return not is_diagnostic(metric) and metric.rsplit("/", 1)[-1] != "lr" and not metric.endswith("_best")


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
