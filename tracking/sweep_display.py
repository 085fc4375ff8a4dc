"""Terminal views of a sweep (rich): a live status line while it runs, the trial table at the end."""

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.live import Live
from rich.table import Table

from tracking.pareto import front_trials

STATE_NAMES = {
    TrialState.COMPLETE: "done", TrialState.RUNNING: "running", TrialState.FAIL: "failed",
    TrialState.PRUNED: "pruned", TrialState.WAITING: "queued",
}  # fmt: skip


def status_line(study: optuna.Study) -> str:
    trials = study.get_trials(deepcopy=False)
    counts = {name: sum(t.state == state for t in trials) for state, name in STATE_NAMES.items()}
    line = f"[bold]{study.study_name}[/]  " + "  ".join(f"{name} {n}" for name, n in counts.items())
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if complete and len(study.directions) > 1:
        line += f"  Pareto front {len(front_trials(study))} trials"
    elif complete:
        best = study.best_trial
        line += f"  best {best.value:.4g} (trial {best.number}: {short_params(best.params)})"
    return line


def short_params(params: dict) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in params.items())


def trial_table(study: optuna.Study, metrics: str | list[str]) -> Table:
    """One row per trial: number, state, parameters, one column per objective, duration and failure
    reason; with several objectives, trials on the Pareto front (Optuna's `best_trials`) are marked."""
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    front = front_trials(study) if len(metrics) > 1 else set()
    title = f"sweep {study.study_name}: {', '.join(metrics)}" + ("  (* = Pareto front)" if len(metrics) > 1 else "")
    table = Table(title=title)
    for column in ("#", "state", "parameters", *metrics, "seconds", "note"):
        table.add_column(column, overflow="fold")
    for t in study.get_trials(deepcopy=False):
        seconds = (
            (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start
            else None
        )
        values = t.values or [None] * len(metrics)
        table.add_row(
            f"{t.number}*" if t.number in front else str(t.number), STATE_NAMES.get(t.state, t.state.name.lower()),
            short_params(t.params), *("" if v is None else f"{v:.4f}" for v in values),
            "" if seconds is None else f"{seconds:.0f}", t.user_attrs.get("reason", ""),
        )  # fmt: skip
    return table


class LiveStatus:
    """A one-line live display, refreshed by the sweep's main loop."""

    def __init__(self, console: Console):
        self.live = Live(console=console, refresh_per_second=2, transient=False)

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        return self.live.__exit__(*exc)

    def tick(self, study: optuna.Study) -> None:
        self.live.update(status_line(study))
