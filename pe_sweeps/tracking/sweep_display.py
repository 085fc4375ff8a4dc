"""Terminal views of a sweep (rich): a live status while it runs (counts, best trial, each running trial's
step, ETA and log, the database and the dashboard command), the trial table at the end."""

import time
from pathlib import Path

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.live import Live
from rich.table import Table

from pe_sweeps.tracking.pareto import front_trials
from pe_sweeps.tracking.records import RunRecord
from pe_sweeps.tracking.storage_url import redact_url
from pe_sweeps.tracking.trial_child import latest_record

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


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def progress(record: RunRecord | None, now: float | None = None) -> str:
    """`step 120/3000, ETA 4m10s` from a run record (steps since its first step, and their rate)."""
    record = record or RunRecord()
    step, total = record.step, record.max_steps
    if step is None:
        return "validating" if record.history else "starting"
    text = f"step {step}/{total}" if total and total > 0 else f"step {step}"
    done = step - (record.first_step or 1) + 1
    elapsed = (now or time.time()) - (now or time.time() if record.first_step_at is None else record.first_step_at)
    if total and total > 0 and done > 0 and elapsed > 0:
        text += f", ETA {duration((total - step) * elapsed / done)}"
    return text


def running_lines(study: optuna.Study, now: float | None = None) -> list[str]:
    """One line per running trial: number, parameters, step / max_steps, ETA and where its log is."""
    lines = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_dir = t.user_attrs.get("trial_dir")
        record = latest_record(Path(trial_dir)) if trial_dir else None
        log = t.user_attrs.get("log") or "(starting)"
        lines.append(f"  trial {t.number} ({short_params(t.params)}): {progress(record, now)}  log {log}")
    return lines


def dashboard_command(url: str) -> str:
    return f"optuna-dashboard {redact_url(url)} --host 127.0.0.1"


def where_lines(url: str, study_dir: Path | None = None) -> list[str]:
    """The study database, the dashboard command and, for offline W&B runs, the `wandb sync` command."""
    lines = [f"study database: {redact_url(url)}", f"dashboard: {dashboard_command(url)}"]
    if study_dir is not None and any(Path(study_dir).glob("trial-*/runs/*/wandb/offline-run-*")):
        lines.append(f"W&B (offline): wandb sync {study_dir}/trial-*/runs/*/wandb/offline-run-*")
    return lines


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

    def __init__(self, console: Console, url: str | None = None):
        self.live = Live(console=console, refresh_per_second=2, transient=False)
        self.url = url

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        return self.live.__exit__(*exc)

    def tick(self, study: optuna.Study) -> None:
        lines = [status_line(study), *running_lines(study)]
        if self.url:
            lines += where_lines(self.url)
        self.live.update("\n".join(lines))
