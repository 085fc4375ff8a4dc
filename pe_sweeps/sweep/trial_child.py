"""A trial's child process as the sweep sees it from outside: its argv (expanded as `wandb agent` does) and
environment, the run records it writes (read for the metric and noted in the trial's user attributes),
the checkpoint a retry resumes, and one line saying why it failed."""

import os
import re
import signal
import sys
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial
from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

from pe_sweeps import layout
from pe_sweeps.layout import program_path, trial_env
from pe_sweeps.runs.records import RECORD_FILE, RunRecord, read_record
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.options import SweepOptions
from pe_sweeps.sweep.trial_devices import memory_fraction, slot_cpus, trial_threads, visible_gpus


def build_command(sweep: dict, params: dict, trial_dir: Path) -> list[str]:
    """The child's argv, expanded as `wandb agent` does (the interpreter is this one, not `python`)."""
    command = create_sweep_command(list(sweep.get("command", sf.DEFAULT_COMMAND)))
    macros = create_sweep_command_args({"args": {k: {"value": v} for k, v in params.items()}})
    json_file = trial_dir / "args.json"
    json_file.write_text(macros["args_json"][0])
    program = program_path(sweep.get("program", "cli.py"), os.getcwd())
    macros.update(
        env=["/usr/bin/env"], interpreter=[sys.executable], program=[program], args_json_file=[str(json_file)]
    )
    argv = []
    for chunk in map(str, command):
        argv += macros.get(chunk[2:-1]) or [] if chunk.startswith("${") and chunk.endswith("}") else [chunk]
    return argv


def child_env(study_name: str, trial_dir: Path, slot: int, opts: SweepOptions) -> dict:
    """The environment of worker `slot`'s trial: the sweep's, less its launcher's placement, plus the trial's
    folders, its GPUs (and memory cap when --trials_per_gpu shares them), its cores and OMP_NUM_THREADS."""
    # out root: where `--model.init_from=run:NAME` looks, so trials find runs of earlier sweeps
    env = layout.trial_base_env(dict(os.environ))  # a trial is a job of its own, never the launcher's rank N
    env.update(trial_env(trial_dir, opts.out_dir, study_name))
    if opts.devices_per_trial:  # --trials_per_gpu consecutive slots share one group of the sweep's GPUs
        first = slot // opts.trials_per_gpu * opts.devices_per_trial
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible_gpus()[first : first + opts.devices_per_trial])
        env[layout.TRIAL_GPUS_ENV] = str(opts.devices_per_trial)  # the trial refuses to run with fewer
    fraction = memory_fraction(opts)
    env.pop(layout.TRIAL_GPU_MEMORY_ENV, None)  # a sweep run as another's trial: never its own trial's cap
    if fraction is not None:  # the trial caps its allocator (children.check_given_gpus)
        env[layout.TRIAL_GPU_MEMORY_ENV] = f"{fraction:.6g}"
    env.pop(layout.TRIAL_CPUS_ENV, None)
    cpus = slot_cpus(opts, slot)
    if cpus:  # the trial is pinned to them as it starts (children.pin_trial_cpus)
        env[layout.TRIAL_CPUS_ENV] = ",".join(map(str, cpus))
    env["OMP_NUM_THREADS"] = str(trial_threads(opts))
    return env


def record_paths(trial_dir: Path) -> list[Path]:
    """The run records under a trial folder (`runs/*/record.json`: a retried trial has several), oldest first."""
    return sorted(Path(trial_dir).glob(f"runs/*/{RECORD_FILE}"), key=lambda p: p.stat().st_mtime)


def latest_record_path(trial_dir: Path) -> Path | None:
    paths = record_paths(trial_dir)
    return paths[-1] if paths else None


def latest_record(trial_dir: Path) -> RunRecord | None:
    """The newest run record of a trial folder (None before the child wrote one)."""
    path = latest_record_path(trial_dir)
    return read_record(path, warn=False) if path else None  # None also while caught mid-write


def finished_record(trial_dir: Path, metrics: list[str]) -> RunRecord | None:
    """A record under `trial_dir` of a run that finished with every objective logged, if any."""
    for path in reversed(record_paths(trial_dir)):
        record = read_record(path, warn=False)
        if record and record.status == "finished" and finite(record.final, metrics):
            return record
    return None


def note_run(trial: optuna.Trial, trial_dir: Path) -> bool:
    """Put the trial's record path and W&B run (id, path, offline folder) into its user attributes, for
    optuna-dashboard; True once the W&B run (or a record without one, after fit start) is noted."""
    path = latest_record_path(trial_dir)
    record = read_record(path, warn=False) if path else None
    if not record:
        return False
    trial.set_user_attr("record", str(path))
    where = record.wandb
    for key in ("id", "path", "dir"):
        if where.get(key):
            trial.set_user_attr(f"wandb_run_{key}", where[key])
    return bool(where) or record.started_at is not None


def resume_checkpoint(dead: list[FrozenTrial]) -> tuple[Path, FrozenTrial] | None:
    """The newest readable last checkpoint of the trials this one retries (a retry killed before its first
    checkpoint leaves its predecessor's as the one to resume), with the trial that wrote it."""
    found = []
    for trial in dead:
        folder = trial.user_attrs.get("trial_dir")
        found += [(p, trial) for p in Path(folder).glob("runs/*/checkpoints/last.ckpt")] if folder else []
    for path, trial in sorted(found, key=lambda item: item[0].stat().st_mtime, reverse=True):
        if readable(path):
            return path, trial
    return None


def readable(checkpoint: Path) -> bool:
    """False for a checkpoint cut short by the kill, or one that is not plain data (the retry then starts from
    scratch); read as every checkpoint is (`read_checkpoint`: weights_only, never code)."""
    from lightning_modules.checkpoint_io import read_checkpoint
    from pe_core.errors import ConfigError

    try:
        read_checkpoint(checkpoint, "resume")
        return True
    except ConfigError:  # truncated zip, partial write, crafted: any failure to open means "do not resume"
        return False


def finite(final: dict, metrics: list[str]) -> bool:
    """Every objective was logged and none is NaN."""
    return all(m in final and final[m] == final[m] for m in metrics)


def crashed(returncode: int, record: RunRecord | None) -> bool:
    """Killed by a signal (-N, or 128+N through a shell), or died without the error a run reports itself
    (exit 2 is a bad config, 3 a diverged loss: both would fail again)."""
    return returncode < 0 or returncode > 128 or (returncode not in (0, 2, 3) and not (record and record.error))


ERROR_LINE = re.compile(r"(^error:|^[\w.]*(Error|Exception|Interrupt)\b|Traceback|Killed|[Ee]rror)")


WARNING_LINE = re.compile(r"[Ww]arn")


def last_error_line(log: Path) -> str:
    """The child's last line that reports an error (not a warning), else its last non-warning line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()] if log.is_file() else []
    lines = [line for line in lines if line and not WARNING_LINE.search(line)]
    errors = [line for line in lines if ERROR_LINE.search(line)]
    return (errors or lines or ["no output"])[-1]


# the fit CLI's one-line parse errors (cli_errors.py), as failure_reason reports an exit-2 child:
# `--KEY: expected ...`, `--KEY: Option 'NAME' is not accepted`, `unrecognized arguments: --KEY=VALUE`
REJECTED = re.compile(r"^exit code 2: error: (?:--([\w.]+):(?: Option '(\w+)' is not accepted)?|"
                      r"unrecognized arguments: --([\w.]+)=)")  # fmt: skip


def rejected_option(reason: str) -> str | None:
    """The option (`data.preset`) a trial's command refused to parse, from its failure reason; else None."""
    match = REJECTED.match(reason)
    if not match:
        return None
    key, inner, unrecognized = match.groups()
    return unrecognized or (f"{key}.{inner}" if inner else key)


def failure_reason(returncode: int, record: RunRecord | None, metric: str, trial_dir: Path) -> str:
    """One line: why a trial failed (killed, diverged, raised, or never logged the sweep metric)."""
    if record and record.error:
        return f"{record.status}: {record.error}"[:300]
    if returncode == 0:
        logged = sorted(record.final if record else {})
        return f"metric {metric!r} was not logged (or is NaN); logged: {', '.join(logged[:12]) or 'nothing'}"
    if returncode < 0:
        try:
            how = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:  # a signal number without a name
            how = f"killed by signal {-returncode}"
    else:
        how = f"exit code {returncode}"
    return f"{how}: {last_error_line(trial_dir / 'output.log')}"[:300]
