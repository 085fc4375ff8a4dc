"""W&B defaults: offline unless a key is configured, one naming scheme for every run, and what each
run adds to W&B beyond Lightning's logging (identity and resolved config, summaries with a direction,
per-length accuracy as a table and a line plot)."""

import netrc
import os
import re
from pathlib import Path

from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities import rank_zero_only

from lightning_modules.metrics import goal

STEP = "trainer/global_step"  # the x axis WandbLogger declares for every metric
STAGE_METRIC = re.compile(r"^(train|val|test)/")


def has_api_key() -> bool:
    """True when W&B could log online: WANDB_API_KEY set or an api.wandb.ai entry in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def default_wandb_mode() -> str:
    """Respect WANDB_MODE; otherwise "online" with a key and "offline" without (set for children too)."""
    if not os.environ.get("WANDB_MODE"):
        os.environ["WANDB_MODE"] = "online" if has_api_key() else "offline"
    return os.environ["WANDB_MODE"]


def run_name(task: str, encoding: str, seed: int) -> str:
    return f"{task}-{encoding}-s{seed}"


def run_group(task: str, encoding: str) -> str:
    return f"{task}/{encoding}"


def make_wandb_logger(run_dir: Path, name: str, group: str, project: str, entity: str | None, tags: list[str]):
    """A Lightning WandbLogger writing under run_dir; never needs network when offline."""
    default_wandb_mode()
    os.environ.setdefault("WANDB_SILENT", "true")
    return DirectedWandbLogger(
        name=name, group=group, project=project, entity=entity, save_dir=str(run_dir), tags=tags,
        job_type="train",
    )  # fmt: skip


class DirectedWandbLogger(WandbLogger):
    """WandbLogger that declares every train/, val/ and test/ metric before its first value: summary =
    best by the metric's direction (`lightning_modules.metrics.goal`) and last, x axis trainer/global_step.
    Exact names, not globs: in wandb 0.31 a glob such as "val/acc*" races with WandbLogger's own "*" glob
    (which one applies to a metric is random), while an exact definition always wins."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._declared: set[str] = set()

    @rank_zero_only
    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        for key in sorted(k for k in metrics if STAGE_METRIC.match(k) and k not in self._declared):
            self.experiment.define_metric(key, step_metric=STEP, summary=f"{goal(key)},last")
            self._declared.add(key)
        super().log_metrics(metrics, step)


def wandb_run(trainer):
    """The W&B run of the trainer's WandbLogger on global rank 0; None without one or on other ranks."""
    loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
    return loggers[0].experiment if loggers and trainer.is_global_zero else None


def describe_run(trainer, record: dict) -> None:
    """At fit start: identity (task, encoding, seed_everything, sweep) and the resolved config into the
    W&B config, so that `compare --wandb` sees what a local record holds. `seed_everything`, not `seed`,
    which is the data seed in the datamodule's hyperparameters."""
    run = wandb_run(trainer)
    if run is None:
        return
    identity = {k: record.get(k) for k in ("task", "encoding", "sweep")}
    identity.update(seed_everything=record.get("seed"), resolved_config=record.get("config"))
    run.config.update(identity, allow_val_change=True)


def per_length(metrics: dict, prefix: str) -> dict[int, float]:
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    return {int(m[1]): float(v) for k, v in metrics.items() if (m := pattern.match(k))}


def log_length_table(trainer) -> None:
    """At fit end: final validation accuracy per length as a wandb.Table and a line plot."""
    run = wandb_run(trainer)
    acc = per_length(trainer.callback_metrics, "val/acc_len_")
    if run is None or not acc:
        return
    import wandb

    tok_acc = per_length(trainer.callback_metrics, "val/tok_acc_len_")
    table = wandb.Table(columns=["length", "acc", "tok_acc"], data=[[n, acc[n], tok_acc.get(n)] for n in sorted(acc)])
    plot = wandb.plot.line(table, "length", "acc", title="val exact-match accuracy by length")
    run.log({"val_by_length/table": table, "val_by_length/acc": plot})
