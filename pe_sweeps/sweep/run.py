"""`cli.py sweep FILE`: run a W&B sweep file with Optuna, offline, resumable and in parallel.

Each trial runs the file's `command` as a child process, expanded exactly as `wandb agent` expands it
(W&B's own `create_sweep_command*` helpers), so the child is the same `cli.py fit` an agent starts
and may itself use DDP. The child writes its run record (runs/records.py) at every validation;
this process reads it, reports each value of the sweep metric to the trial at the step W&B plots it at
(the record's `wandb_step`, Lightning's logged `trainer/global_step`; hyperband still counts validations,
W&B's "iteration") and stops the child when the pruner says so. Each trial's user attributes name its
record, its log and its W&B run. A child running this project's `cli.py` is forked from a server that has
already imported torch, Lightning and W&B (sweep/warm_start.py; `--cold_start` starts every child as a
new interpreter); both kinds are supervised by the same code.

Exactly once: every grid point is queued once at study creation and popped by `study.ask()`. Steps that
read and then write the study (ask and its queue pop, tell and re-queue, recovering dead trials, creating
the study) hold a `StudyLock` (storages/study_lock.py: a file lock on SQLite, an advisory lock on
PostgreSQL, both freed when their holder dies). A failed trial's retry is queued before the failure is
told, in the same locked step: a sweep killed between the two leaves a RUNNING trial that recovery fails
without queueing a second retry. Storage errors in a worker are retried; `tell` on a trial another
process already finished is skipped.

Resuming: the study lives in SQLite under the output directory, one database per sweep file shared by
the studies `--set` and `--reseed` make from it (or `--storage postgresql://...`).
Finished trials are never repeated. A trial whose sweep process died is found either at once (same
host and pid namespace, its pid is gone or reused) or by Optuna's heartbeat (any host), marked failed
and re-queued; a trial whose child was killed by a signal or crashed is re-queued up to
`--max_retries` times. A retry resumes from its predecessor's last checkpoint, in its predecessor's trial
folder (the same run folder, record and W&B run), and continues its pruning steps. SIGINT / SIGTERM
stop the children, re-queue their trials and exit 130 / 143.

This module checks the options and runs the parts: supervision.py (worker threads, heartbeats, the stop
signal), trial_run.py (one trial, start to result), trial_child.py (its child's argv, environment, records,
checkpoint and failure reason), study_protocol.py (naming, creating or resuming the study, the grid queue,
the budget), recovery.py (retries and dead trials), trial_devices.py (cores and GPUs per trial),
pe_sweeps/storages/ (the storage, its URL, its lock), display.py (the views);
every private Optuna, CPython or W&B call is in internals.py.
"""

import os
import shlex
import signal
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

from pe_core.errors import ConfigError
from pe_sweeps import layout
from pe_sweeps.runs.records import check_name
from pe_sweeps.storages import storage
from pe_sweeps.storages.storage import retrying
from pe_sweeps.storages.storage_url import hide_secrets, url_password
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.options import SweepOptions
from pe_sweeps.sweep.recovery import TOKEN, owner_of, repair_promised_retries
from pe_sweeps.sweep.study_protocol import (
    apply_overrides,
    given_up_points,
    name_study,
    nothing_succeeded,
    unfinished_points,
)
from pe_sweeps.sweep.supervision import Sweep
from pe_sweeps.sweep.trial_devices import check_devices


def check_options(opts: SweepOptions, sweep: dict | None = None) -> None:
    """One line per bad option, before any file or database is touched. Given the sweep file (or an explicit
    --devices_per_trial), also resolves the GPUs per trial and `--workers auto` (`check_devices`)."""
    for option, minimum in (("heartbeat", 1), ("max_retries", 0), ("max_failures_in_a_row", 0), ("storage_outage", 1),
                            ("devices_per_trial", 0), ("threads_per_trial", 0), ("trials_per_gpu", 1),
                           ("ensemble_seeds", 1)):  # fmt: skip
        value = getattr(opts, option)
        if option == "devices_per_trial" and value is None:  # the default: resolved with the sweep file
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigError(f"--{option} must be an integer >= {minimum}, got {value!r}")
    if opts.cold_start and opts.warm_any:
        raise ConfigError("--cold_start and --warm_any contradict each other; pass one")
    if opts.workers != "auto" and (not isinstance(opts.workers, int) or isinstance(opts.workers, bool)
                                   or opts.workers < 1):  # fmt: skip
        raise ConfigError(f"--workers must be an integer >= 1 or auto, got {opts.workers!r}")
    if opts.study_name is not None:
        check_name("--study_name", opts.study_name)
    if opts.storage is not None and url_password(opts.storage):
        print(f"warning: the --storage URL's password is visible to every local user in `ps`; put the URL in "
              f"${layout.STORAGE_ENV} or the password in PGPASSWORD or ~/.pgpass instead", file=sys.stderr)  # fmt: skip
    if opts.storage is None and os.environ.get(layout.STORAGE_ENV):
        opts.storage = os.environ[layout.STORAGE_ENV]
    if sweep is not None or opts.devices_per_trial is not None:
        check_devices(opts, sweep)


def check_ensembles(opts: SweepOptions, sweep: dict) -> None:
    """--ensemble_seeds K > 1 groups a grid point's seeds into one `cli.py fit` child: one line for a sweep that
    cannot (not a grid, no `seed_everything` values, not cli.py, trials given GPUs)."""
    if opts.ensemble_seeds == 1:
        return
    seeds = (sweep.get("parameters") or {}).get("seed_everything") or {}
    program = Path(sweep.get("program", "cli.py")).name
    why = (f"its method is {sweep['method']!r}, not grid" if sweep["method"] != "grid"
           else "it has no `seed_everything: {values: [...]}` parameter" if len(seeds.get("values") or []) < 2
           else f"its program is {program!r}, not cli.py" if program != "cli.py"
           else "its trials are given GPUs (ensembles train on the CPU only): pass --devices_per_trial 0"
           if opts.devices_per_trial else None)  # fmt: skip
    if why:
        raise ConfigError(f"--ensemble_seeds {opts.ensemble_seeds} trains a grid point's seeds as one ensemble, but "
                          f"this sweep cannot: {why}; drop --ensemble_seeds")  # fmt: skip


def run_sweep(opts: SweepOptions, argv: list[str] | None = None) -> optuna.Study:
    """Run (or resume) the sweep with a live status line, then print the trial table. Exits 130 / 143 on
    SIGINT / SIGTERM (trials re-queued), 2 if the trials' command rejects an option every trial is given,
    1 if grid points are left unfinished or failed for good, or a worker stopped. `argv`: the command's
    arguments after `sweep`, to print the command that retries the points failed for good."""
    check_options(opts)
    sweep, suffix = apply_overrides(sf.load_sweep(opts.file), opts.set.split(",") if opts.set else [])
    if opts.retry_failed and sweep["method"] != "grid":
        raise ConfigError(f"--retry_failed queues a grid's points failed for good again; this sweep's method is "
                          f"{sweep['method']!r} (a failed trial of it counts as run): drop --retry_failed")  # fmt: skip
    if opts.devices_per_trial is None:  # GPUs per trial by default: one, unless the sweep file asks for more
        check_devices(opts, sweep)
    check_ensembles(opts, sweep)
    name_study(opts, sweep, suffix)

    from pe_sweeps.compare.command import print_comparison
    from pe_sweeps.runs.console import app_console
    from pe_sweeps.sweep.display import LiveStatus, print_lines, trial_table, where_lines

    runner = Sweep(sweep, opts)
    handlers = {sig: signal.signal(sig, runner.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    console = app_console()  # in a file or pipe: a line per trial, nothing wrapped or cut
    try:
        with LiveStatus.for_runner(console, runner) as live:
            runner.run(on_tick=live.tick)
            if not storage.OUTAGE.gave_up:
                runner.show(live.final)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    study = runner.study
    if storage.OUTAGE.gave_up:  # the storage cannot tell anything: no table, one line
        print(f"error: sweep {study.study_name} stopped: {storage.OUTAGE.gave_up}; its running trials were stopped "
              "and are resumed by the same command once the storage is back", file=sys.stderr)  # fmt: skip
        raise SystemExit(1)
    if runner.stop_signal:
        stopped = sum("stopped by" in t.user_attrs.get("reason", "") and owner_of(t.user_attrs).get("token") == TOKEN
                      for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))  # fmt: skip
        print(f"error: sweep {study.study_name} stopped by {runner.stop_signal_name()}: {stopped} running trial(s) "
              "stopped and re-queued; run the same command again to resume", file=sys.stderr)  # fmt: skip
        raise SystemExit(128 + runner.stop_signal)
    console.print()
    console.print(trial_table(study, runner.search.metrics))
    print_comparison(opts.out_dir, study.study_name, runner.search.metrics, console=console)
    offline_view = layout.offline_runs_view(layout.study_dir(opts.out_dir, study.study_name))
    print_lines(console, where_lines(runner.url, offline_view))
    for error in runner.errors:
        print(f"error: {error}", file=sys.stderr)
    with runner.lock:  # a failed trial that promised a retry it lacks is unfinished, not failed for good
        retrying(lambda: repair_promised_retries(study, study.get_trials(deepcopy=False), opts.max_retries))
    if runner.streak.rejected and runner.streak.stopped():  # a bad option, not unfinished work: say only that
        raise SystemExit(2)
    left = unfinished_points(study, sweep) if sweep["method"] == "grid" else []
    if left:
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in left[:10])
        print(f"error: sweep {study.study_name}: {len(left)} grid point(s) neither finished nor failed for good "
              f"({shown}); run the same command again to finish them", file=sys.stderr)  # fmt: skip
    given_up = given_up_points(retrying(study.get_trials, False)) if sweep["method"] == "grid" else []
    if given_up:
        print(given_up_line(study.study_name, given_up, retry_command(opts, argv)), file=sys.stderr)
    elif nothing_succeeded(study):  # for a grid, the line above names the points and the first reason
        print(nothing_succeeded(study), file=sys.stderr)
    if left or given_up or runner.errors or nothing_succeeded(study):
        raise SystemExit(1)
    return study


def given_up_line(study_name: str, given_up: list, command: str) -> str:
    """The one error line of grid points failed for good: which (the first ten), the last failure's reason, and
    the command that queues them again."""
    shown = "; ".join(", ".join(f"{k}={v}" for k, v in t.params.items()) for t in given_up[:10])
    more = f" and {len(given_up) - 10} more" if len(given_up) > 10 else ""
    last = max(given_up, key=lambda t: t.number).user_attrs.get("reason", "no reason")
    return (f"error: sweep {study_name}: {len(given_up)} grid point(s) failed for good ({shown}{more}), the last "
            f"failure: {last[:300]}; retry them with: {command}")  # fmt: skip


def retry_command(opts: SweepOptions, argv: list[str] | None) -> str:
    """This sweep's command with --retry_failed (its storage URL's password hidden); without `argv` (a caller
    other than `cli.py sweep`), the words for it."""
    if argv is None:
        return "the same command with --retry_failed"
    given = [a for a in argv if not a.replace("-", "_").startswith("__retry_failed")]
    command = shlex.join(["python", "cli.py", "sweep", *given, "--retry_failed"])
    return hide_secrets(command, opts.storage) if opts.storage else command
