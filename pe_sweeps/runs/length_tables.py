"""Per-length results in W&B: at fit end, the final per-length metrics (`val/acc_len_<n>`, ...) against a
`length` axis and as one table with the run's identity, so W&B plots a metric against length by encoding."""

import re

from pe_sweeps.runs.wandb_setup import BY_LENGTH, wandb_run

LENGTH = "length"  # the x axis of the per-length results (`log_by_length`)


def per_length(metrics: dict, prefix: str) -> dict[int, float]:
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    return {int(m[1]): float(v) for k, v in metrics.items() if (m := pattern.match(k))}


def by_length_rows(metrics: dict) -> dict[int, dict[str, float]]:
    """{length: {"val_by_length/acc": ..., ...}} from the per-length metrics (`BY_LENGTH`)."""
    rows: dict[int, dict[str, float]] = {}
    for prefix, name in BY_LENGTH.items():
        for n, value in per_length(metrics, prefix).items():
            rows.setdefault(n, {})[name] = value
    return dict(sorted(rows.items()))


def log_by_length(trainer, record) -> None:
    """At fit end: the final per-length results against a `length` axis (`define_metric`, so W&B plots
    accuracy, token accuracy or perplexity against length, runs grouped by encoding), and one table with
    task, encoding, seed (from `record`, the run's RunRecord), length and the metrics."""
    run = wandb_run(trainer)
    rows = by_length_rows(trainer.callback_metrics)
    if run is None or not rows:
        return
    import wandb

    names = sorted({name for row in rows.values() for name in row})
    run.define_metric(LENGTH, hidden=True)
    for name in names:  # exact names: a glob would race with WandbLogger's "*" (see DirectedWandbLogger)
        run.define_metric(name, step_metric=LENGTH, summary="none")  # a best over lengths means nothing
    columns = ["task", "encoding", "seed", LENGTH, *(n.rsplit("/", 1)[-1] for n in names)]
    identity = [record.task, record.encoding, record.seed]
    data = [[*identity, n, *(row.get(name) for name in names)] for n, row in rows.items()]
    for n, row in rows.items():
        run.log({LENGTH: n, **row})
    run.log({"val_by_length/table": wandb.Table(columns=columns, data=data)})
