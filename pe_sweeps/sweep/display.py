"""Views of a sweep (rich): on a terminal, a live status while it runs (counts, best trial, each running trial's
step, ETA and log), wrapped only between words that belong together; in a file or pipe (nohup, sbatch, CI), one
plain line per trial started, done, failed or pruned and a progress line every `--progress_every` seconds,
written as they happen. Then the database and the commands to watch it (printed unwrapped, so they paste whole
from a narrow terminal), and the trial table at the end."""

import statistics
import time
from datetime import datetime
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pe_sweeps import layout
from pe_sweeps.compare.pareto import front_trials
from pe_sweeps.runs.records import RunRecord
from pe_sweeps.storages.storage_url import redact_url
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.study_protocol import QUEUED
from pe_sweeps.sweep.trial_child import latest_record

STATE_NAMES = {
    TrialState.COMPLETE: "done", TrialState.RUNNING: "running", TrialState.FAIL: "failed",
    TrialState.PRUNED: "pruned", TrialState.WAITING: "queued",
}  # fmt: skip


def status_chunks(study: optuna.Study) -> list[str]:
    """The status line as chunks that are never split: the study's name, `done 3`, ..., `best 0.9`, `(trial 2:`
    and the best trial's parameters one by one."""
    trials = study.get_trials(deepcopy=False)
    counts = {name: sum(t.state == state for t in trials) for state, name in STATE_NAMES.items()}
    chunks = [study.study_name, *(f"{name} {n}" for name, n in counts.items())]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if complete and len(study.directions) > 1:
        chunks.append(f"Pareto front {len(front_trials(study))} trials")
    elif complete:
        best = study.best_trial
        chunks += [f"best {best.value:.4g}", f"(trial {best.number}:", *param_chunks(best.params, "", ")")]
    return chunks


def status_line(study: optuna.Study) -> str:
    """The status line as one line of text: `quickstart  done 3  running 1 ... best 0.9 (trial 2: x=0.3)`."""
    chunks = status_chunks(study)
    counts, best = chunks[: len(STATE_NAMES) + 1], chunks[len(STATE_NAMES) + 1 :]
    return "  ".join(counts) + ("  " + " ".join(best) if best else "")


def param_chunks(params: dict, open_: str = "(", close: str = ")") -> list[str]:
    """`(x=0.1,`, `encoding=rope)`: a trial's parameters, one chunk each, in `open_` ... `close`."""
    items = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in params.items()] or [""]
    chunks = [f"{item}," for item in items[:-1]] + [items[-1]]
    chunks[0] = open_ + chunks[0]
    chunks[-1] += close
    return chunks


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


def running_chunks(study: optuna.Study, now: float | None = None) -> list[list[str]]:
    """Per running trial, the chunks of its line: `trial 3`, its parameters, `step 120/3000,`, `ETA 4m10s` and
    `log PATH`."""
    lines = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_dir = t.user_attrs.get("trial_dir")
        record = latest_record(Path(trial_dir)) if trial_dir else None
        log = t.user_attrs.get("log") or "(starting)"
        steps = progress(record, now).split(", ")
        steps = [f"{part}," for part in steps[:-1]] + steps[-1:]
        lines.append([f"trial {t.number}", *param_chunks(t.params, "(", "):"), *steps, f"log {log}"])
    return lines


def running_lines(study: optuna.Study, now: float | None = None) -> list[str]:
    """One line per running trial: number, parameters, step / max_steps, ETA and where its log is."""
    return ["  " + " ".join(chunks).replace(" log ", "  log ") for chunks in running_chunks(study, now)]


def pack(chunks: list[str], width: int, indent: str = "") -> list[str]:
    """The chunks joined by spaces into lines of at most `width` columns, broken only between chunks. A chunk
    wider than a line alone keeps its first word and the end of the rest (`log …/trial-3/output.log`)."""
    lines, line = [], indent
    for chunk in chunks:
        room = max(width - len(indent), 8)
        if len(chunk) > room:
            head, _, rest = chunk.partition(" ")
            chunk = f"{head} …{rest[len(rest) - (room - len(head) - 2) :]}" if rest and room > len(head) + 4 else chunk
        if line.strip() and len(line) + 1 + len(chunk) > width:
            lines.append(line)
            line = indent
        line += (" " if line.strip() else "") + chunk
    return [*lines, line] if line.strip() else lines


class StatusView:
    """The live status at the console's width: the status line, then a line per running trial, each wrapped
    only between chunks (`trial 3`, `val/acc_ood`, a path stay whole; an over-long path is shortened at its
    start, never folded)."""

    def __init__(self, study: optuna.Study):
        self.status, self.running = status_chunks(study), running_chunks(study)

    def __rich_console__(self, console, options):
        width = options.max_width
        status = pack(self.status, width, "")
        for index, line in enumerate(status):
            text = Text(line, no_wrap=True, overflow="ellipsis")
            if index == 0:
                text.stylize("bold", 0, len(self.status[0]))
            yield text
        for chunks in self.running:
            for line in pack(chunks, width, "  ") if chunks else []:
                yield Text(line, no_wrap=True, overflow="ellipsis")


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
    caption; when even one parameter does not fit beside the numbers, the parameters move to the caption too,
    as it says."""

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
        one_param = max([len("parameters")] + [len(short_params({k: v})) for r in rows for k, v in r[2].items()])
        reasons = max([len("note")] + [len(r[5]) for r in rows])
        compact = sum(widths) + params + reasons + 3 * (len(numbers) + 2) + 1 > width
        narrow = sum(widths) + one_param + 3 * (len(numbers) + 1) + 1 > width
        several = len(self.metrics) > 1
        title = f"sweep {self.study.study_name}: {', '.join(self.metrics)}" + ("  (* = Pareto front)" * several)
        number = [r[0].rstrip("*") for r in rows]
        notes = [f"trial {n}: {r[5]}" for n, r in zip(number, rows) if r[5]] if compact else []
        if narrow:
            notes = [f"trial {n}: {short_params(r[2])}" + (f"; {r[5]}" if r[5] else "") for n, r in zip(number, rows)]
            caption = "\n".join(["narrow for this terminal's width: parameters and notes below the table", *notes])
        else:
            caption = "\n".join(["compact for this terminal's width: notes below the table", *notes]) if notes else None
        table = Table(title=title, caption=caption, caption_justify="left")
        table.add_column("#", no_wrap=True, justify="right")
        table.add_column("state", no_wrap=True)
        if not narrow:
            table.add_column("parameters", no_wrap=compact, overflow="fold")  # compact: one parameter a line
        for column in (*self.metrics, "seconds"):
            table.add_column(column, no_wrap=True, justify="right")
        if not compact:
            table.add_column("note", overflow="fold")
        for number, state, params, values, seconds, reason in rows:
            shown = [] if narrow else [short_params(params, "\n" if compact else ", ")]
            table.add_row(number, state, *shown, *values, seconds, *([] if compact else [reason]))
        return table


def trial_table(study: optuna.Study, metrics: str | list[str]) -> TrialTable:
    """One row per trial: number, state, parameters, one column per objective, duration and failure
    reason; with several objectives, trials on the Pareto front (Optuna's `best_trials`) are marked."""
    return TrialTable(study, [metrics] if isinstance(metrics, str) else list(metrics))


class LiveStatus:
    """The sweep's view while it runs, refreshed by its main loop (`tick`), below the database and dashboard
    command (printed once, unwrapped: a live region is redrawn at the terminal's width). On a terminal, a rich
    Live region (`StatusView`); in a file or pipe, `PlainProgress`'s lines. `metrics`, `sweep`, `workers` and
    `every` (seconds between progress lines) feed the plain lines: `for_runner` takes them from a `Sweep`."""

    def __init__(self, console: Console, url: str | None = None, metrics=(), sweep: dict | None = None,
                 workers: int = 1, every: float = 60.0):  # fmt: skip
        self.console, self.url = console, url
        self.live = Live(console=console, refresh_per_second=2, transient=False) if console.is_terminal else None
        self.plain = None if console.is_terminal else PlainProgress(console, list(metrics), sweep, workers, every)

    @classmethod
    def for_runner(cls, console: Console, runner) -> "LiveStatus":
        """The view of a `Sweep` (sweep/supervision.py): its database, metrics, budget, workers and
        `--progress_every`."""
        opts = runner.opts
        return cls(console, runner.url, runner.search.metrics, runner.sweep, opts.workers, opts.progress_every)

    def __enter__(self):
        if self.url:
            print_lines(self.console, where_lines(self.url))
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        return self.live.__exit__(*exc) if self.live is not None else None

    def tick(self, study: optuna.Study, final: bool = False) -> None:
        """Refresh the view; `final`: the sweep's work is over, so a file gets its last counts too."""
        if self.live is not None:
            self.live.update(StatusView(study), refresh=True)
        else:
            self.plain.tick(study, force_progress=final)

    def final(self, study: optuna.Study) -> None:
        """The last refresh, once the workers are done: the view ends on the final counts, in a file as on a
        terminal."""
        self.tick(study, final=True)


def seconds_of(trial: FrozenTrial, now: datetime | None = None) -> float | None:
    """A trial's seconds from its start to its end (to `now` while it runs); None before it starts."""
    end = trial.datetime_complete or now
    return None if not (trial.datetime_start and end) else max((end - trial.datetime_start).total_seconds(), 0.0)


def starting(trial: FrozenTrial) -> bool:
    """A trial asked for but not yet started: its log is not named yet."""
    return trial.state == TrialState.RUNNING and "log" not in trial.user_attrs


class PlainProgress:
    """A sweep's view in a file or pipe (`cli.py sweep ... > sweep.out`, nohup, sbatch, CI), where a live region
    draws nothing until the end: one line as each trial starts, is done, fails or is pruned (its number,
    parameters, metrics and seconds), and a progress line (counts, best, elapsed, ETA) at the start and every
    `every` seconds. rich flushes each print, so `tail -f` sees the lines as they are written."""

    def __init__(self, console: Console, metrics: list[str], sweep: dict | None, workers: int, every: float):
        self.console, self.metrics, self.sweep, self.workers, self.every = console, metrics, sweep, workers, every
        self.states: dict[int, TrialState] | None = None  # trial number -> state last seen; None before the first
        self.started = time.monotonic()
        self.last_progress: float | None = None

    def tick(self, study: optuna.Study, force_progress: bool = False) -> None:
        trials = study.get_trials(deepcopy=False)
        first = self.states is None
        known = self.states or {}
        # at the first tick, a resumed sweep's finished trials are in the progress line, not one line each
        shown = [t for t in trials if not first or t.state == TrialState.RUNNING]
        lines = [line for t in shown if (line := self.event(t, known.get(t.number)))]
        self.states = {t.number: t.state for t in trials if not starting(t)}  # started: once its log is named
        now = time.monotonic()
        if force_progress or self.last_progress is None or now - self.last_progress >= self.every:
            self.last_progress = now
            lines.append(self.progress_line(study, trials))
        print_lines(self.console, lines)

    def event(self, trial: FrozenTrial, before: TrialState | None) -> str | None:
        """The line of a trial that started or ended since the last tick, None if nothing changed."""
        state = trial.state
        if state == before or state == TrialState.WAITING:
            return None
        params = short_params(trial.params)
        if state == TrialState.RUNNING:
            log = trial.user_attrs.get("log")
            return (
                None if starting(trial) else f"trial {trial.number} started: {params or '(no parameters)'}; log {log}"
            )
        seconds = seconds_of(trial)
        took = "" if seconds is None else f" in {seconds:.0f}s"
        reason = trial.user_attrs.get("reason", "")
        if state == TrialState.COMPLETE:
            return f"trial {trial.number} done{took}: {self.values(trial)} ({params})"
        if state == TrialState.PRUNED:
            last = trial.intermediate_values[max(trial.intermediate_values)] if trial.intermediate_values else None
            value = "" if last is None else f", {self.metrics[0]}={last:.4g}"
            return f"trial {trial.number} pruned{took}: {reason or 'pruned'}{value} ({params})"
        return f"trial {trial.number} {STATE_NAMES.get(state, state.name.lower())}{took}: {reason} ({params})"

    def values(self, trial: FrozenTrial) -> str:
        values = trial.values or []
        return ", ".join(f"{m}={v:.4g}" for m, v in zip(self.metrics, values)) or "no value"

    def progress_line(self, study: optuna.Study, trials: list[FrozenTrial]) -> str:
        elapsed = duration(time.monotonic() - self.started)
        return f"[{time.strftime('%H:%M:%S')}] {status_line(study)}; elapsed {elapsed}, {self.eta(trials)}"

    def eta(self, trials: list[FrozenTrial]) -> str:
        """`ETA ~3m10s`: the trials still to start and the running ones' rest, at the mean seconds of the finished
        trials, over the workers; what it cannot know (no trial finished, no run_cap), it says."""
        now = datetime.now()
        durations = [s for t in trials if t.state.is_finished() and (s := seconds_of(t)) is not None]
        to_start = self.to_start(trials)
        if to_start is None:
            return "no end set (no run_cap): runs until stopped"
        running = [s for t in trials if t.state == TrialState.RUNNING and (s := seconds_of(t, now)) is not None]
        if not durations:
            return f"ETA after the first trial ends ({to_start + len(running)} to go)"
        mean = statistics.fmean(durations)
        left = to_start * mean + sum(max(mean - s, 0.0) for s in running)
        return f"ETA ~{duration(left / max(self.workers, 1))}"

    def to_start(self, trials: list[FrozenTrial]) -> int | None:
        """Trials not started yet: a grid's queued points, or what is left of run_cap (as `budget_left`
        counts); None when nothing bounds the sweep."""
        if self.sweep is None:
            return sum(t.state == TrialState.WAITING for t in trials)
        grid = self.sweep["method"] == "grid"
        retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
        started = [t for t in trials if t.number not in retried and t.state != TrialState.WAITING]
        started = [t for t in started if QUEUED in t.system_attrs] if grid else started
        budget = sf.trial_budget(self.sweep)
        left = None if budget is None else max(budget - len(started), 0)
        if grid:
            waiting = sum(t.state == TrialState.WAITING for t in trials)
            left = waiting if left is None else min(left, waiting)
        return left
