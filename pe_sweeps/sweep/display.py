"""Terminal views of a sweep (rich): a live status while it runs (counts, best trial, each running trial's
step, ETA and log), the database and the commands to watch it (printed unwrapped, so they paste whole from a
narrow terminal), the trial table at the end."""

import time
from pathlib import Path

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.live import Live
from rich.table import Table

from pe_sweeps import layout
from pe_sweeps.compare.pareto import front_trials
from pe_sweeps.runs.records import RunRecord
from pe_sweeps.storages.storage_url import redact_url
from pe_sweeps.sweep.trial_child import latest_record

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


def where_lines(url: str, offline_view: Path | None = None) -> list[str]:
    """The study database, the dashboard command and, given the study's folder of offline W&B runs
    (`layout.offline_runs_view`), the commands that upload them and browse them all in the terminal."""
    lines = [f"study database: {redact_url(url)}", f"dashboard: {dashboard_command(url)}"]
    if offline_view is not None:
        lines.append(f"W&B (offline): wandb sync {offline_view.parent}/{layout.TRIAL_OFFLINE_RUNS}")
        lines.append(f"W&B (offline), every trial's run in the terminal: wandb leet {offline_view}")
    return lines


def print_lines(console: Console, lines: list[str]) -> None:
    """Lines as they are, never broken by rich: a command or path stays one line to copy, however narrow the
    terminal (which wraps it only on screen)."""
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True, markup=False)


def short_params(params: dict, sep: str = ", ") -> str:
    return sep.join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in params.items())


def trial_rows(study: optuna.Study, metrics: list[str]) -> list[tuple[str, str, dict, list[str], str, str]]:
    """Per trial: number (`*` on the Pareto front of several objectives), state, parameters, objective values,
    seconds and failure reason, as the trial table shows them."""
    front = front_trials(study) if len(metrics) > 1 else set()
    rows = []
    for t in study.get_trials(deepcopy=False):
        done, started = t.datetime_complete, t.datetime_start
        seconds = "" if not (done and started) else f"{(done - started).total_seconds():.0f}"
        values = ["" if v is None else f"{v:.4f}" for v in t.values or [None] * len(metrics)]
        number = f"{t.number}*" if t.number in front else str(t.number)
        state = STATE_NAMES.get(t.state, t.state.name.lower())
        rows.append((number, state, t.params, values, seconds, t.user_attrs.get("reason", "")))
    return rows


class TrialTable:
    """The trial table for the console it is printed on: numbers never split (columns that do not wrap); when a
    row does not fit on one line, the parameters are stacked one per line and the failure reasons move to the
    caption, as it says."""

    def __init__(self, study: optuna.Study, metrics: list[str]):
        self.study, self.metrics = study, metrics

    def __rich_console__(self, console, options):
        yield self.table(options.max_width)

    def table(self, width: int) -> Table:
        rows = trial_rows(self.study, self.metrics)
        numbers = ["#", "state", *self.metrics, "seconds"]  # each cell one number or word
        cells = [[r[0], r[1], *r[3], r[4]] for r in rows]
        widths = [max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(numbers)]
        params = max([len("parameters")] + [len(short_params(r[2])) for r in rows])
        reasons = max([len("note")] + [len(r[5]) for r in rows])
        compact = sum(widths) + params + reasons + 3 * (len(numbers) + 2) + 1 > width
        several = len(self.metrics) > 1
        title = f"sweep {self.study.study_name}: {', '.join(self.metrics)}" + ("  (* = Pareto front)" * several)
        notes = [f"trial {r[0].rstrip('*')}: {r[5]}" for r in rows if r[5]] if compact else []
        caption = "\n".join(["compact for this terminal's width: notes below the table", *notes]) if notes else None
        table = Table(title=title, caption=caption, caption_justify="left")
        table.add_column("#", no_wrap=True, justify="right")
        table.add_column("state", no_wrap=True)
        table.add_column("parameters", no_wrap=compact, overflow="fold")  # compact: one parameter a line
        for column in (*self.metrics, "seconds"):
            table.add_column(column, no_wrap=True, justify="right")
        if not compact:
            table.add_column("note", overflow="fold")
        for number, state, params, values, seconds, reason in rows:
            note = [] if compact else [reason]
            table.add_row(number, state, short_params(params, "\n" if compact else ", "), *values, seconds, *note)
        return table


def trial_table(study: optuna.Study, metrics: str | list[str]) -> TrialTable:
    """One row per trial: number, state, parameters, one column per objective, duration and failure
    reason; with several objectives, trials on the Pareto front (Optuna's `best_trials`) are marked."""
    return TrialTable(study, [metrics] if isinstance(metrics, str) else list(metrics))


class LiveStatus:
    """A live display refreshed by the sweep's main loop, below the database and dashboard command (printed once,
    unwrapped: a live region is redrawn at the terminal's width)."""

    def __init__(self, console: Console, url: str | None = None):
        self.live = Live(console=console, refresh_per_second=2, transient=False)
        self.console, self.url = console, url

    def __enter__(self):
        if self.url:
            print_lines(self.console, where_lines(self.url))
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        result = self.live.__exit__(*exc)
        if not self.console.is_terminal:  # rich ends the final render in a file or pipe without a line break
            self.console.line()
        return result

    def tick(self, study: optuna.Study) -> None:
        self.live.update("\n".join([status_line(study), *running_lines(study)]))
