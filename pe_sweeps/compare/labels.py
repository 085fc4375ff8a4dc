"""Readable names of metric keys for the report's axes, legends and titles, defined in one place:
`val/acc_ood` -> `exact-match accuracy beyond training length`, `test/ppl_ctx_512` -> `perplexity at context 512
(test)`. A key not listed here is shown as it is, never guessed."""

import re

# what `acc` means depends on the task module that logged it (comp.kinds: the module's class name)
ACCURACY = {"MaskedLMModel": "masked-token accuracy", "SequenceClassifier": "accuracy"}
EXACT = "exact-match accuracy"
BEYOND = " beyond training length"
NAMES = {
    "acc": EXACT,
    "acc_ood": EXACT + BEYOND,
    "acc_best": "best " + EXACT,
    "tok_acc": "token accuracy",
    "tok_acc_ood": "token accuracy" + BEYOND,
    "loss": "loss",
    "ppl": "perplexity",
    "score": "GLUE score (mean of the task's metrics)",
    "f1": "F1",
    "mcc": "Matthews correlation",
    "pearson": "Pearson correlation",
    "spearman": "Spearman correlation",
    "bleu": "BLEU",
    "examples": "evaluation examples",
    "abs_mae": "absolute-position probe MAE",
    "rel_error": "relative-position probe error",
    "hidden_abs_mae": "absolute-position probe MAE (hidden states)",
    "hidden_rel_error": "relative-position probe error (hidden states)",
}
STAGES = {"val": "", "test": " (test)", "train": " (training)", "probe": ""}  # validation: the default, unsaid
PER_LENGTH = re.compile(r"(?P<base>.+)_len_(?P<n>\d+)$")
PER_CONTEXT = re.compile(r"ppl_ctx_(?P<n>\d+)(_stride_(?P<stride>\d+))?$")


def base_label(short: str, kind: str | None = None) -> str | None:
    """The label of a metric's name without its stage (`acc_ood`), or None when it is not known."""
    if short.endswith("_se") and (inner := base_label(short[: -len("_se")], kind)):
        return f"standard error of the {inner}"
    if match := PER_LENGTH.match(short):
        inner = base_label(match["base"], kind)
        return inner and f"{inner} at length {match['n']}"
    if match := PER_CONTEXT.match(short):
        stride = f", sliding window stride {match['stride']}" if match["stride"] else ""
        return f"perplexity at context {match['n']}{stride}"
    if short == "acc" and kind in ACCURACY:
        return ACCURACY[kind]
    return NAMES.get(short)


def metric_label(metric: str, kind: str | None = None) -> str:
    """A metric key as a figure shows it; `kind` (the task module's class name, e.g. `MaskedLMModel`) says
    which accuracy `acc` is. Unknown keys come back unchanged."""
    stage, _, short = metric.rpartition("/")
    label = base_label(short, kind)
    if label is None or stage not in STAGES:
        return metric
    return label + STAGES[stage]


def value_label(metric: str, value: str, kind: str | None = None) -> str:
    """The metric as `compare --value` takes it: the final validation unsaid, `best` and `step=N` said."""
    label = metric_label(metric, kind)
    return label if value == "final" else f"{label} ({value.replace('=', ' ')})"
