"""`cli.py sweep FILE`: run a W&B sweep file with Optuna, offline, resumable and in parallel.

Each trial runs the file's `command` as a child process, expanded exactly as `wandb agent` expands it
(W&B's own `create_sweep_command*` helpers), so the child is the same `cli.py fit` an agent starts
and may itself use DDP. The child writes its run record (tracking/records.py) at every validation;
this process reads it, reports each value of the sweep metric to the trial at the step W&B plots it at
(the record's `wandb_step`, Lightning's logged `trainer/global_step`; hyperband still counts validations,
W&B's "iteration") and stops the child when the pruner says so. Each trial's user attributes name its
record, its log and its W&B run. A child running this project's `cli.py` is forked from a server that has
already imported torch, Lightning and W&B (tracking/warm_start.py; `--cold_start` starts every child as a
new interpreter); both kinds are supervised by the same code.

Exactly once: every grid point is queued once at study creation and popped by `study.ask()`. Steps that
read and then write the study (ask and its queue pop, tell and re-queue, recovering dead trials, creating
the study) hold a `StudyLock` (tracking/study_lock.py: a file lock on SQLite, an advisory lock on
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
"""

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import optuna
import sqlalchemy
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState
from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

from pe_sweeps import layout
from pe_sweeps.errors import ConfigError
from pe_sweeps.layout import SWEEP_PARAMS_ENV, program_path, study_db, trial_env
from pe_sweeps.tracking import storage
from pe_sweeps.tracking import sweep_file as sf
from pe_sweeps.tracking.children import stop_child
from pe_sweeps.tracking.failpoints import failpoint
from pe_sweeps.tracking.manifest import write_manifest
from pe_sweeps.tracking.records import RECORD_FILE, check_name, read_record
from pe_sweeps.tracking.run_naming import short_value
from pe_sweeps.tracking.search import SAMPLER_ATTR, Search, build_search, check_sampler
from pe_sweeps.tracking.slurm_options import SlurmOptions
from pe_sweeps.tracking.storage import grace_period, open_storage, quote_password, storage_error, url_password
from pe_sweeps.tracking.study_lock import StudyLock
from pe_sweeps.tracking.warm_start import TrialStarter, WarmChild

QUEUED = "pe_queued"  # system attr of grid points queued at study creation (and of their retries)
CRASHES = "pe_crashes"  # system attr: how many predecessors of this retry had their child die or crash
TOKEN = uuid.uuid4().hex  # this sweep process, unlike a pid, is never reused

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


@dataclass
class SweepOptions:
    """Options of `cli.py sweep`."""

    file: str  # a W&B sweep file (sweeps/*.yaml)
    study_name: str | None = None  # default: the file's `name:`, else its file name (plus the --set values)
    storage: str | None = None  # default: $PE_SWEEP_STORAGE, else sqlite:///<out_dir>/sweeps/<name>/optuna.db,
    # one per sweep file (its `name:` or file name), shared by the studies --set and --reseed make; per
    # --study_name when given
    workers: int | Literal["auto"] = 1  # trials run in parallel by this process; auto: see `resolve_workers`
    devices_per_trial: int | None = None  # GPUs given to each trial (of this sweep's CUDA_VISIBLE_DEVICES);
    # default 1 when GPUs are visible (trials side by side, never DDP over all of them), or the number the
    # sweep's own trainer.devices sets; 0: not pinned (every visible GPU; the CPU without GPUs)
    threads_per_trial: int = 0  # each trial's OMP_NUM_THREADS; 0 = the cores split evenly among the running trials
    trials_per_device: int = 1  # with --devices-per-trial: trials that share each GPU (small models)
    cold_start: bool = False  # start every trial as a new interpreter, never from the fork server
    warm_any: bool = False  # fork any Python program the sweep's interpreter runs, not only cli.py (tests)
    out_dir: str = "out"  # studies, trial folders and their runs go under <out_dir>/sweeps/
    seed: int = 0  # sampler seed
    heartbeat: int = 10  # seconds between heartbeats; a trial silent for 3x this (+ 20 s) is dead
    max_retries: int = 2  # times a trial whose child was killed or crashed is re-queued
    max_failures_in_a_row: int = 10  # stop the sweep after this many trials failed with the same reason; 0: never
    set: str | None = None  # KEY=VALUE[,KEY=VALUE]: fix parameters (one study per value, e.g. per encoding)
    reseed: int = 0  # with --per: tune per group, then run each group's best config x N fresh seeds (reseed.py)
    per: str | None = None  # KEY[,KEY]: the parameters whose values are tuned separately (with --reseed)
    reseed_data: bool = True  # with --reseed: stage 2's data seed follows each fresh seed; --no-reseed-data: stage 1's
    launcher: Literal["local", "slurm"] = "local"  # slurm: --jobs SLURM tasks run this sweep (tracking/slurm.py)
    jobs: int = 1  # with --launcher slurm: the tasks of the job array, each one sweep process of the same study
    dry_run: bool = False  # with --launcher slurm: print the sbatch script and exit, submitting nothing
    slurm: SlurmOptions = field(default_factory=SlurmOptions)  # with --launcher slurm: each task's sbatch options


def check_options(opts: SweepOptions, sweep: dict | None = None) -> None:
    """One line per bad option, before any file or database is touched. Given the sweep file (or an explicit
    --devices_per_trial), also resolves the GPUs per trial and `--workers auto` (`check_devices`)."""
    for option, minimum in (("heartbeat", 1), ("max_retries", 0), ("max_failures_in_a_row", 0),
                            ("devices_per_trial", 0), ("threads_per_trial", 0), ("trials_per_device", 1)):  # fmt: skip
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


def check_devices(opts: SweepOptions, sweep: dict | None) -> None:
    """Resolve `--devices_per_trial` (default: from the sweep file's own trainer.devices and the visible GPUs)
    and `--workers auto`, and check the GPU slots: one line each."""
    if opts.devices_per_trial is None:
        opts.devices_per_trial = default_devices_per_trial(sweep or {})
    if opts.trials_per_device > 1 and not opts.devices_per_trial:
        raise ConfigError(
            f"--trials_per_device {opts.trials_per_device} shares GPUs: it needs --devices_per_trial >= 1"
        )
    if opts.workers == "auto":
        opts.workers = resolve_workers(opts)
    if opts.devices_per_trial:
        check_gpu_slots(opts)


def cpu_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. a container's or taskset's), else all."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def visible_gpus() -> list[str]:
    """The GPUs this sweep may hand its trials, named as its own CUDA_VISIBLE_DEVICES names them (indices or
    UUIDs, passed on verbatim; CUDA ignores the entries after the first it cannot use, hence only the first
    `device_count()`), else 0 .. N-1. Counted in this process only: the fork server never counts them."""
    import torch

    count = torch.cuda.device_count()
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return [str(index) for index in range(count)]
    return [entry.strip() for entry in mask.split(",") if entry.strip()][:count]


def sweep_devices(sweep: dict):
    """The trainer.devices a sweep file sets: a fixed parameter's `value`, or `--trainer.devices X` in its
    command; "varied" for a parameter with several values; None when it sets none."""
    for key, spec in (sweep.get("parameters") or {}).items():
        if key in ("trainer.devices", "trainer.init_args.devices") and isinstance(spec, dict):
            return spec["value"] if "value" in spec else "varied"
    command = [str(chunk) for chunk in sweep.get("command") or []]
    for index, chunk in enumerate(command):
        option, equals, value = chunk.partition("=")
        if option in ("--trainer.devices", "--trainer.init_args.devices"):
            return value if equals else (command[index + 1] if index + 1 < len(command) else None)
    return None


def default_devices_per_trial(sweep: dict) -> int:
    """GPUs per trial when --devices_per_trial is not given: the number the sweep's trainer.devices asks for,
    not pinned (0) when it asks for something else (auto, -1, a list, several values), else one GPU per trial
    when GPUs are visible (the shipped configs' `devices: auto` would otherwise make every trial DDP over all
    of them, with a global batch N times the config's); 0 without GPUs."""
    if not visible_gpus():
        return 0
    asked = sweep_devices(sweep)
    if asked is None:
        return 1
    return int(asked) if str(asked).isdigit() and int(asked) > 0 else 0


def gpu_slots(opts: SweepOptions, visible: int) -> int:
    """Trials that can run at once on `visible` GPUs: whole groups of --devices_per_trial, each shared by
    --trials_per_device trials."""
    return visible // opts.devices_per_trial * opts.trials_per_device


def resolve_workers(opts: SweepOptions) -> int:
    """`--workers auto`: on CPU, cores // --threads_per_trial (one single-threaded trial per core by default);
    on GPUs, (visible GPUs // --devices_per_trial) x --trials_per_device."""
    if not opts.devices_per_trial:
        return max(1, cpu_cores() // max(1, opts.threads_per_trial))
    visible = len(visible_gpus())
    if opts.devices_per_trial > visible:
        raise ConfigError(f"--workers auto: --devices_per_trial {opts.devices_per_trial} is more than the {visible} "
                          "visible GPU(s) (CUDA_VISIBLE_DEVICES)")  # fmt: skip
    return gpu_slots(opts, visible)


def check_gpu_slots(opts: SweepOptions) -> None:
    """More workers than GPU slots would leave some trials without a GPU (training on the CPU): one line."""
    visible = visible_gpus()
    slots = gpu_slots(opts, len(visible))
    seen = f"{len(visible)} visible GPU(s) (CUDA_VISIBLE_DEVICES={','.join(visible)})" if visible else "no visible GPU"
    if not slots:
        raise ConfigError(f"--devices_per_trial {opts.devices_per_trial} is more than the {seen}; pass "
                          f"--devices_per_trial {len(visible)} or fewer, or 0 to train on the CPU")  # fmt: skip
    if opts.workers > slots:
        raise ConfigError(
            f"--workers {opts.workers} is more than the {slots} trial slot(s) of the {seen} with --devices_per_trial "
            f"{opts.devices_per_trial} x --trials_per_device {opts.trials_per_device}; pass --workers {slots} or "
            "fewer, --workers auto, or a larger --trials_per_device"
        )


def retrying(action, *args, attempts: int = 8, what: str = "storage"):
    """Run `action(*args)`, retrying storage errors (a locked SQLite file, a dropped connection)."""
    for attempt in range(attempts):
        try:
            return action(*args)
        except storage.transient_errors() as error:  # OperationalError, InterfaceError, Redis' ConnectionError
            if attempt == attempts - 1:
                raise
            print(f"warning: {what}: {str(error).splitlines()[0][:200]}; retrying", file=sys.stderr)
            time.sleep(min(0.5 * 2**attempt, 5.0))


def host_id() -> str:
    """This machine and pid namespace: containers that share a hostname differ in boot id or pid namespace."""
    parts = [socket.gethostname()]
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(os.readlink(path) if path.endswith("/pid") else Path(path).read_text().strip())
        except OSError:
            pass
    return "/".join(parts)


HOST_ID = host_id()


def apply_overrides(sweep: dict, overrides: list[str]) -> tuple[dict, str]:
    """Fix parameters to constants; returns the new sweep and a study-name suffix."""
    suffix = []
    if overrides and "search_space" in (sweep.get("scheduler") or {}):
        raise ConfigError("--set fixes the file's parameters; with scheduler.search_space the source file defines them")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or key not in sweep["parameters"]:
            known = ", ".join(sweep["parameters"])
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with KEY one of the sweep's parameters: {known}")
        sweep["parameters"][key] = {"value": yaml.safe_load(value)}
        suffix.append(short_value(value))  # as a run name shows it: `--set KEY={a: 1}` still names one folder
    return sweep, "-".join(suffix)


def base_name(opts: SweepOptions, sweep: dict) -> str:
    """The study name before any --set suffix: --study_name, else the file's `name:`, else its file name."""
    return opts.study_name or str(sweep.get("name") or Path(opts.file).stem)


def storage_url(opts: SweepOptions, storage_name: str) -> str:
    """--storage, else the SQLite database `<out_dir>/sweeps/<storage_name>/optuna.db`."""
    if opts.storage is not None and storage.journal.is_journal_file(opts.storage):
        return str(Path(opts.storage).expanduser().resolve())  # children and --reseed stages run elsewhere
    if opts.storage is not None:
        return quote_password(opts.storage)
    path = study_db(opts.out_dir, storage_name)
    layout.make_dir(path.parent, "--out_dir")
    return f"sqlite:///{path.resolve()}"


def open_study(
    sweep: dict, opts: SweepOptions, storage, study_name: str, locked: bool, search: Search | None = None
) -> optuna.Study:
    """Create the study (queueing every grid point once) or load it, checking it is the same sweep.
    `locked`: this process holds the study's cross-process lock (tracking/study_lock.py), so a study that
    is not ready was left half-made by a process that died while creating it (else: not ready after a
    minute). `search`: the
    sweep file's directions, sampler and pruner (tracking/search.py), built from `sweep` when not given."""
    search = search or build_search(sweep, study_name)
    digest = hashlib.sha256(json.dumps(sweep, sort_keys=True).encode()).hexdigest()[:16]
    kwargs = {"study_name": study_name, "storage": storage, "sampler": search.make_sampler(opts.seed)}
    try:
        study = optuna.create_study(directions=search.directions, pruner=search.pruner, **kwargs)
        study.set_metric_names(search.metrics)  # optuna-dashboard shows "val/acc", not "Objective 0"
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(pruner=search.pruner, **kwargs)
        attrs = study.user_attrs if locked else wait_until_ready(study)
        if attrs.get("ready") and attrs.get("sweep_digest") != digest:
            raise ConfigError(
                f"study {study_name!r} was made from a different sweep file; pass --study_name to start a new one"
            ) from None
        if attrs.get("ready"):
            check_sampler(study, attrs, search, locked)
            return study
    study.set_user_attr("sweep_digest", digest)
    study.set_user_attr("sweep", sweep)
    if search.sampler_settings:  # pinned TPE settings (tracking/search.py): a resume with others is refused
        study.set_user_attr(SAMPLER_ATTR, search.sampler_settings)
    if sweep["method"] == "grid":
        queue_grid(study, sweep)
    study.set_user_attr("ready", True)  # another process may now join
    return study


def queue_grid(study: optuna.Study, sweep: dict) -> None:
    """Queue every grid point once, tagged with its GridSampler grid id: workers in any process then pop
    distinct points atomically (a plain GridSampler may hand the same point to two workers). Points a
    dead creator already queued are not queued again."""
    space = {n: s["values"] for n, s in sweep["parameters"].items() if "values" in s}
    distributions = {n: CategoricalDistribution(v) for n, v in space.items()}
    done = {t.system_attrs.get("grid_id") for t in study.get_trials(deepcopy=False) if QUEUED in t.system_attrs}
    for grid_id, point in enumerate(sf.grid_points(sweep)):
        if grid_id in done:
            continue
        attrs = {"grid_id": grid_id, "search_space": space, QUEUED: True}
        trial = optuna.create_trial(
            state=TrialState.WAITING, params=point, distributions=distributions, system_attrs=attrs
        )
        study.add_trial(trial)


def wait_until_ready(study: optuna.Study, timeout: float = 60.0) -> dict:
    """A process joining a study that another one is still creating waits for its grid to be queued."""
    deadline = time.monotonic() + timeout
    while not (attrs := study.user_attrs).get("ready") and time.monotonic() < deadline:
        time.sleep(0.5)
    return attrs


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
    # out root: where `--model.init_from=run:NAME` looks, so trials find runs of earlier sweeps
    env = layout.trial_base_env(dict(os.environ))  # a trial is a job of its own, never the launcher's rank N
    env.update(trial_env(trial_dir, opts.out_dir, study_name))
    if opts.devices_per_trial:  # --trials_per_device consecutive slots share one group of the sweep's GPUs
        first = slot // opts.trials_per_device * opts.devices_per_trial
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible_gpus()[first : first + opts.devices_per_trial])
        env[layout.TRIAL_GPUS_ENV] = str(opts.devices_per_trial)  # the trial refuses to run with fewer
    env["OMP_NUM_THREADS"] = str(trial_threads(opts))
    return env


def trial_threads(opts: SweepOptions) -> int:
    """--threads_per_trial, else the cores split between the trials that run at once and, on GPUs, between a
    trial's processes (one DDP rank per GPU with `trainer.devices: auto`)."""
    return opts.threads_per_trial or max(1, cpu_cores() // (opts.workers * max(1, opts.devices_per_trial or 0)))


def latest_record_path(trial_dir: Path) -> Path | None:
    paths = sorted(trial_dir.glob(f"runs/*/{RECORD_FILE}"), key=lambda p: p.stat().st_mtime)
    return paths[-1] if paths else None


def latest_record(trial_dir: Path) -> dict | None:
    path = latest_record_path(trial_dir)
    return read_record(path, warn=False) if path else None  # None also while caught mid-write


def finished_record(trial_dir: Path, metrics: list[str]) -> dict | None:
    """A record under `trial_dir` of a run that finished with every objective logged, if any."""
    for path in sorted(trial_dir.glob(f"runs/*/{RECORD_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True):
        record = read_record(path, warn=False)
        if record and record.get("status") == "finished" and finite(record.get("final", {}), metrics):
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
    where = record.get("wandb") or {}
    for key in ("id", "path", "dir"):
        if where.get(key):
            trial.set_user_attr(f"wandb_run_{key}", where[key])
    return bool(where) or "started_at" in record


def predecessors(study: optuna.Study, trial_id: int) -> list[FrozenTrial]:
    """The trials this one retries (its retry history), the latest first."""
    history = study._storage.get_trial(trial_id).system_attrs.get("retry_history") or []
    ids = [study._storage.get_trial_id_from_study_id_trial_number(study._study_id, n) for n in reversed(history)]
    return [study._storage.get_trial(i) for i in ids]


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
    """False for a checkpoint cut short by the kill (the retry then starts from scratch)."""
    import torch

    try:
        torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=True)
        return True
    except Exception:  # truncated zip, partial write: any failure to open means "do not resume"
        return False


def retries_left(trial: FrozenTrial, max_retries: int, crashed: bool) -> bool:
    """Interruptions and dead sweep processes are not the trial's fault and do not count as retries."""
    return trial.system_attrs.get(CRASHES, 0) + crashed <= max_retries


def requeue(study: optuna.Study, trial: FrozenTrial, why: str, max_retries: int, crashed: bool = False) -> bool:
    """Queue a copy of the failed `trial` (same parameters and grid id; `why` in its reason) unless its
    child has died or crashed more than `max_retries` times."""
    if not retries_left(trial, max_retries, crashed):
        return False
    if any(trial.number in t.system_attrs.get("retry_history", []) for t in study.get_trials(deepcopy=False)):
        return True  # queued already (by this trial's own sweep just before it was told, or a repeated call)
    attrs = {**trial.system_attrs, CRASHES: trial.system_attrs.get(CRASHES, 0) + crashed}
    attrs["failed_trial"] = attrs.get("failed_trial", trial.number)
    attrs["retry_history"] = [*attrs.get("retry_history", []), trial.number]
    study.add_trial(optuna.create_trial(
        state=TrialState.WAITING, params=trial.params, distributions=trial.distributions, system_attrs=attrs,
        user_attrs={"reason": f"retry of trial {trial.number}: {why}"[:300]},
    ))  # fmt: skip
    return True


def crashed(returncode: int, record: dict | None) -> bool:
    """Killed by a signal (-N, or 128+N through a shell), or died without the error a run reports itself
    (exit 2 is a bad config, 3 a diverged loss: both would fail again)."""
    return returncode < 0 or returncode > 128 or (returncode not in (0, 2, 3) and not (record or {}).get("error"))


ERROR_LINE = re.compile(r"(^error:|^[\w.]*(Error|Exception|Interrupt)\b|Traceback|Killed|[Ee]rror)")
WARNING_LINE = re.compile(r"[Ww]arn")


def last_error_line(log: Path) -> str:
    """The child's last line that reports an error (not a warning), else its last non-warning line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()] if log.is_file() else []
    lines = [line for line in lines if line and not WARNING_LINE.search(line)]
    errors = [line for line in lines if ERROR_LINE.search(line)]
    return (errors or lines or ["no output"])[-1]


def failure_reason(returncode: int, record: dict | None, metric: str, trial_dir: Path) -> str:
    """One line: why a trial failed (killed, diverged, raised, or never logged the sweep metric)."""
    if record and record.get("error"):
        return f"{record['status']}: {record['error']}"[:300]
    if returncode == 0:
        logged = sorted((record or {}).get("final", {}))
        return f"metric {metric!r} was not logged (or is NaN); logged: {', '.join(logged[:12]) or 'nothing'}"
    if returncode < 0:
        how = (
            f"killed by {signal.Signals(-returncode).name}" if -returncode in signal.Signals._value2member_map_ else ""
        )
        how = how or f"killed by signal {-returncode}"
    else:
        how = f"exit code {returncode}"
    return f"{how}: {last_error_line(trial_dir / 'output.log')}"[:300]


class TrialRun:
    """One trial: start the child, stream its metric into the trial, prune, and tell the result."""

    def __init__(self, runner: "Sweep", study: optuna.Study, slot: int):
        self.runner, self.study, self.slot = runner, study, slot
        self.sweep, self.opts, self.search = runner.sweep, runner.opts, runner.search
        self.metric = self.search.metrics[0]  # the one streamed to the pruner (single-objective only)

    def run(self, trial: optuna.Trial) -> None:
        params = self.search.draw(trial)
        dead = predecessors(self.study, trial._trial_id)
        resumed = resume_checkpoint(dead)
        # a retry that resumes continues in the folder of the attempt whose checkpoint it resumes: that run's
        # folder, record and W&B run (cli.py resumes a fit into its checkpoint's run), and its output.log
        trial_dir = Path(resumed[1].user_attrs["trial_dir"]) if resumed else None
        trial_dir = trial_dir or layout.trial_dir(self.opts.out_dir, self.study.study_name, trial.number)
        trial_dir.mkdir(parents=True, exist_ok=True)
        trial.set_user_attr("trial_dir", str(trial_dir))
        argv = build_command(self.sweep, params, trial_dir)
        failpoint("retry:started" if dead else "trial:started")
        if self.adopt_finished(trial, dead):  # its reason says whose retry it is
            return
        if resumed:
            checkpoint, writer = resumed
            argv.append(f"--ckpt_path={checkpoint}")
            trial.set_user_attr("resumed_from", str(checkpoint))
            for step, value in sorted(writer.intermediate_values.items()):  # the pruner sees one history
                trial.report(value, step)
        trial.set_user_attr("command", " ".join(argv))
        trial.set_user_attr("log", str(trial_dir / "output.log"))
        env = {**child_env(self.study.study_name, trial_dir, self.slot, self.opts), **sf.wandb_env(self.sweep)}
        env[SWEEP_PARAMS_ENV] = json.dumps(sf.varied(self.sweep, params), default=str)  # run names and config
        with open(trial_dir / "output.log", "ab") as log:
            child = self.runner.starter.launch(argv, env, log)  # forked warm, or a new interpreter
            self.runner.quietly(trial.set_user_attr, "start", "warm" if isinstance(child, WarmChild) else "cold")
            outcome = self.follow(trial, child, trial_dir)
        failpoint("child:exited")
        self.tell(trial, child.returncode, outcome, latest_record(trial_dir), trial_dir)

    def adopt_finished(self, trial: optuna.Trial, dead: list[FrozenTrial]) -> bool:
        """If a run of any trial this one retries finished (its child ended after its sweep died, perhaps
        several retries back), take its result: the point is never trained twice."""
        for earlier in dead:
            folder = earlier.user_attrs.get("trial_dir")
            record = finished_record(Path(folder), self.search.metrics) if folder else None
            if record is not None:
                reason = f"trial {earlier.number}'s run finished after its sweep died; result adopted"
                trial.set_user_attr("reason", reason)
                trial.set_user_attr("trial_dir", folder)
                self.tell(trial, 0, None, record, Path(folder))
                return True
        return False

    def follow(self, trial: optuna.Trial, child: subprocess.Popen, trial_dir: Path) -> str | None:
        """Wait for the child; heartbeat; report each new value of the metric (the last ones too, once it
        has exited). Returns "pruned" or "interrupted" when it stopped the child, None when it ended."""
        reported, noted = 0, False
        try:
            while child.poll() is None:
                if not noted:
                    noted = self.runner.quietly(note_run, trial, trial_dir) or False
                if self.runner.stop.is_set():
                    stop_child(child)
                    return "interrupted"
                if self.catch_up(trial, trial_dir, reported) > reported:
                    reported = self.catch_up(trial, trial_dir, reported, report=True)
                    if self.runner.quietly(trial.should_prune):
                        stop_child(child)
                        return "pruned"
                time.sleep(0.5)
        except BaseException:
            stop_child(child)
            raise
        self.catch_up(trial, trial_dir, reported, report=True)
        self.runner.quietly(note_run, trial, trial_dir)
        return None

    def catch_up(self, trial: optuna.Trial, trial_dir: Path, reported: int, report=False) -> int:
        """How many values of the metric the child's record holds; with `report`, report the new ones at
        the step W&B plots them at (`trainer/global_step`, the record's `wandb_step`; else `step`) and
        return how many are now reported. A multi-objective trial reports nothing:
        Optuna's intermediate values feed pruners, which rank one value."""
        if self.search.multi_objective:
            return 0
        record = latest_record(trial_dir) or {"history": []}
        history = [h for h in record.get("history", []) if self.metric in h]
        if not report:
            return len(history)

        def send():
            for index in range(reported, len(history)):
                row = history[index]
                trial.report(row[self.metric], row.get("wandb_step", row.get("step", index + 1)))
            return len(history)

        return self.runner.quietly(send) or reported

    def tell(self, trial, returncode: int, outcome: str | None, record: dict | None, trial_dir: Path) -> None:
        final = (record or {}).get("final", {})
        if outcome == "interrupted":
            reason = f"stopped by {self.runner.stop_signal_name()}; re-queued"
            self.runner.finish(self.study, trial, TrialState.FAIL, reason=reason, requeue_as=(reason, False))
        elif outcome == "pruned":
            reported = self.study._storage.get_trial(trial._trial_id).intermediate_values  # a live Trial has none
            reason = f"pruned at validation {len(reported)}"
            self.runner.finish(self.study, trial, TrialState.PRUNED, reason=reason)
        elif returncode == 0 and finite(final, self.search.metrics):
            values = [final[m] for m in self.search.metrics]
            value = values if self.search.multi_objective else values[0]
            self.runner.finish(self.study, trial, TrialState.COMPLETE, value=value)
        else:
            missing = next((m for m in self.search.metrics if not finite(final, [m])), self.metric)
            reason = failure_reason(returncode, record, missing, trial_dir)
            died = crashed(returncode, record)
            self.runner.finish(
                self.study, trial, TrialState.FAIL, reason=reason, requeue_as=(reason, True) if died else None
            )


def finite(final: dict, metrics: list[str]) -> bool:
    """Every objective was logged and none is NaN."""
    return all(m in final and final[m] == final[m] for m in metrics)


def recover_dead_trials(
    study: optuna.Study, max_retries: int, heartbeat: int, first_seen: dict[int, float] | None = None
) -> None:
    """Fail and re-queue RUNNING trials whose sweep process is gone: at once on this host and pid namespace
    (its pid is gone, or is now another process), on any host once their heartbeat is stale (judged on the
    storage's clock, tracking/storage.py), and a trial that never got its sweep's name and first heartbeat
    after a grace period on this process's own clock (`first_seen`: when this process first saw it so).
    Then re-queue the retry of any failed trial that promised one and has none (`repair_promised_retries`)."""
    grace, first_seen = grace_period(heartbeat), {} if first_seen is None else first_seen
    stale = set(storage.stale_trial_ids(study._storage, study._study_id))
    trials = study.get_trials(deepcopy=False)
    for trial in (t for t in trials if t.state == TrialState.RUNNING):
        attrs = trial.user_attrs
        same_host = attrs.get("host_id") == HOST_ID and attrs.get("token") != TOKEN
        where = f"host {attrs.get('host', '?')}, pid {attrs.get('pid', '?')}"
        if same_host and (attrs.get("pid") == os.getpid() or not _alive(attrs.get("pid", -1))):
            why = f"sweep process died ({where})"
        elif trial._trial_id in stale:
            why = f"no heartbeat for {grace} s from its sweep process ({where})"
        elif (
            "token" not in attrs and time.monotonic() - first_seen.setdefault(trial._trial_id, time.monotonic()) > grace
        ):
            why = "sweep process died before the trial's first heartbeat"
        else:
            continue
        fail_and_requeue(study, trial, why, max_retries)
    repair_promised_retries(study, study.get_trials(deepcopy=False), max_retries)


def fail_and_requeue(study: optuna.Study, trial: FrozenTrial, why: str, max_retries: int) -> None:
    """Mark a dead trial failed with its reason and queue its retry. The retry is queued first: a kill
    between the two leaves the trial RUNNING with its retry queued, and the next recovery fails it without
    queueing a second one (`requeue` finds the first)."""
    again = retries_left(trial, max_retries, crashed=False)
    reason = f"{why}; re-queued" if again else f"{why}; not re-queued: --max_retries {max_retries} reached"
    try:
        study._storage.set_trial_user_attr(trial._trial_id, "reason", reason[:300])
        if again:
            requeue(study, trial, why, max_retries)
            failpoint("recover:requeued")
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:  # another process was first
        pass


def repair_promised_retries(study: optuna.Study, trials: list[FrozenTrial], max_retries: int) -> int:
    """Queue the missing retry of every failed trial whose reason says it was re-queued (a study written by
    an older version, which failed the trial before queueing its retry, or a kill between the two).
    Returns how many were queued."""
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    queued = 0
    for trial in trials:
        reason = trial.user_attrs.get("reason", "")
        if trial.state == TrialState.FAIL and reason.endswith("re-queued") and "not re-queued" not in reason:
            if trial.number not in retried:
                queued += requeue(study, trial, f"{reason.removesuffix('; re-queued')} (retry restored)", max_retries)
    return queued


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError, TypeError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def budget_left(study: optuna.Study, sweep: dict) -> bool:
    """Fewer trials started than run_cap (for every method, grid included; a failed trial that was re-queued
    counts once, through its retry), and for a grid, queued points remain."""
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    started = [t for t in trials if t.number not in retried and t.state != TrialState.WAITING]
    if sweep["method"] == "grid":
        started = [t for t in started if QUEUED in t.system_attrs]
    budget = sf.trial_budget(sweep)
    if budget is not None and len(started) >= budget:
        return False
    return sweep["method"] != "grid" or any(t.state == TrialState.WAITING for t in trials)


def unfinished_points(study: optuna.Study, sweep: dict) -> list[dict]:
    """Grid points whose latest trial is neither finished nor failed for good (still queued or running).
    Points never started because run_cap was reached are not unfinished: the cap chose to leave them."""
    capped = sf.trial_budget(sweep) is not None and not budget_left(study, sweep)
    latest: dict[int, FrozenTrial] = {}
    for t in study.get_trials(deepcopy=False):
        if QUEUED in t.system_attrs:
            grid_id = t.system_attrs["grid_id"]
            if grid_id not in latest or t.number > latest[grid_id].number:
                latest[grid_id] = t
    left = [t for _, t in sorted(latest.items()) if t.state in (TrialState.WAITING, TrialState.RUNNING)]
    return [
        t.params
        for t in left
        if not (capped and t.state == TrialState.WAITING and "retry_history" not in t.system_attrs)
    ]


def nothing_succeeded(study: optuna.Study) -> str | None:
    """The one error line of a study in which trials ran and none completed (every method), else None."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.COMPLETE for t in trials) or not any(t.state.is_finished() for t in trials):
        return None
    failed = [t for t in trials if t.state == TrialState.FAIL]
    first = failed[0].user_attrs.get("reason", "no reason") if failed else "every trial was pruned"
    return f"error: sweep {study.study_name}: no trial succeeded ({len(failed)} failed; the first: {first[:200]})"


class Heartbeats:
    """A thread that beats, every `interval` seconds, for each trial this sweep process holds: from the moment
    `ask` gives it until its result is told, so a live trial is never declared dead while its sweep waits
    for the study lock, the fork server or the storage."""

    def __init__(self, storage_, interval: int, quietly):
        self.storage, self.interval, self.quietly = storage_, interval, quietly
        self.held: set[int] = set()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.beat, daemon=True, name="heartbeats")

    def hold(self, trial_id: int) -> None:
        with self.lock:
            self.held.add(trial_id)

    def release(self, trial_id: int) -> None:
        with self.lock:
            self.held.discard(trial_id)

    def start(self) -> None:
        self.thread.start()

    def beat(self) -> None:
        while not self.done.wait(self.interval):
            with self.lock:
                held = sorted(self.held)
            for trial_id in held:
                self.quietly(storage.record_heartbeat, self.storage, trial_id)

    def close(self) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join(timeout=30)


class FailureStreak:
    """Trials told failed in a row with the same reason (numbers and paths aside); `stopped()` says why the
    sweep should stop once there are `limit` of them (0: never), e.g. a parameter every trial rejects."""

    def __init__(self, limit: int):
        self.limit, self.key, self.count, self.reason = limit, None, 0, ""

    def add(self, state: TrialState, reason: str | None) -> None:
        if state != TrialState.FAIL:
            self.key, self.count = None, 0
            return
        key = re.sub(r"\d+|/\S+", "#", reason or "")[:120]
        self.count = self.count + 1 if key == self.key else 1
        self.key, self.reason = key, reason or "no reason"

    def stopped(self) -> str | None:
        if self.limit and self.count >= self.limit:
            return (f"stopped after {self.count} trials in a row failed with the same reason "
                    f"(--max_failures_in_a_row {self.limit}): {self.reason[:200]}")  # fmt: skip
        return None


class Sweep:
    """Workers that ask the study for trials and run them until the budget is spent or a signal stops them."""

    def __init__(self, sweep: dict, opts: SweepOptions):
        self.sweep, self.opts = sweep, opts
        self.study_name = opts.study_name or base_name(opts, sweep)
        self.search = build_search(sweep, self.study_name)
        url = storage_url(opts, self.study_name)
        self.url = url
        try:
            self.lock = StudyLock(url, self.study_name)
            with self.lock:  # creating the tables and queueing the grid happen once
                storage.check_clock(url, opts.heartbeat)  # staleness needs one clock
                if warning := storage.network_filesystem_warning(url):
                    print(warning, file=sys.stderr)
                self.storage = open_storage(url, opts.heartbeat)
                locked = self.lock.process is not None
                self.study = retrying(open_study, sweep, opts, self.storage, self.study_name, locked, self.search)
                write_manifest(opts.out_dir, self.study_name, sweep, opts.file, url)  # what compare reads
        except ConfigError:  # already one line (a storage that cannot be opened, a study of another sweep file)
            raise
        except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError, *storage.transient_errors()) as error:
            raise storage_error(url, error) from None
        self.errors: list[str] = []
        self.first_seen: dict[int, float] = {}  # trials seen RUNNING without a sweep's name (recover_dead_trials)
        self.heartbeats = Heartbeats(self.storage, opts.heartbeat, self.quietly)
        self.streak = FailureStreak(opts.max_failures_in_a_row)
        self.starter = TrialStarter(layout.study_dir(opts.out_dir, self.study_name), opts.cold_start, opts.warm_any)
        self.stop = threading.Event()
        self.stop_signal: int | None = None

    def stop_signal_name(self) -> str:
        return signal.Signals(self.stop_signal).name if self.stop_signal else "a stop request"

    def request_stop(self, signum: int, frame=None) -> None:
        self.stop_signal = self.stop_signal or signum
        self.stop.set()

    def quietly(self, action, *args):
        """A storage call that may fail (heartbeat, report): warn and go on; the next loop tries again."""
        try:
            return action(*args)
        except storage.transient_errors() as error:
            print(f"warning: storage: {str(error).splitlines()[0][:200]}", file=sys.stderr)
            return None

    def next_trial(self, study: optuna.Study) -> optuna.Trial | None:
        with self.lock:
            if self.stop.is_set():
                return None
            recover_dead_trials(study, self.opts.max_retries, self.opts.heartbeat, self.first_seen)
            if not budget_left(study, self.sweep):
                return None
            if self.search.terminator and self.search.terminator(study):  # the optimizer factory's stop rule
                return None
            trial = study.ask()
            # before anything else: a first heartbeat and who runs it, so it is never stranded; from now until
            # its result is told, this process's heartbeat thread beats for it (waits for the lock included)
            storage.record_heartbeat(study._storage, trial._trial_id)
            self.heartbeats.hold(trial._trial_id)
            for key, value in {"host": socket.gethostname(), "host_id": HOST_ID, "pid": os.getpid(),
                               "token": TOKEN}.items():  # fmt: skip
                trial.set_user_attr(key, value)
            queued = QUEUED in study._storage.get_trial(trial._trial_id).system_attrs
            if self.sweep["method"] == "grid" and not queued:
                trial.set_user_attr("reason", "grid already covered by other workers")
                study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)  # lost a race for the last point
                self.heartbeats.release(trial._trial_id)
                return None
            return trial

    def others_running(self, study: optuna.Study) -> bool:
        """Grid points another sweep process is running: this one waits for them instead of exiting, so a
        point whose process dies is re-queued (stale heartbeat) and finished here, and the exit status
        reports the whole grid."""
        if self.stop.is_set() or self.sweep["method"] != "grid":
            return False
        running = retrying(study.get_trials, False, (TrialState.RUNNING,))
        return any(QUEUED in t.system_attrs and t.user_attrs.get("token") != TOKEN for t in running)

    def finish(self, study, trial, state, value=None, reason=None, requeue_as=None) -> None:
        """Tell the trial's result (skipped if another process already failed it) and re-queue it if asked."""

        def tell():
            with self.lock:
                if study._storage.get_trial(trial._trial_id).state.is_finished():
                    return  # another process found it stale, failed and re-queued it
                current = study._storage.get_trial(trial._trial_id)
                again = bool(requeue_as) and retries_left(current, self.opts.max_retries, requeue_as[1])
                note = reason
                if requeue_as and not again:
                    note = f"{reason[:220]}; not re-queued: --max_retries {self.opts.max_retries} reached"
                if note:
                    trial.set_user_attr("reason", note[:300])
                if again:  # first: killed before the tell, the trial stays RUNNING and recovery finds its retry
                    requeue(study, current, requeue_as[0], self.opts.max_retries, crashed=requeue_as[1])
                    failpoint("finish:requeued")
                try:
                    study.tell(trial, value, state=state)
                except optuna.exceptions.UpdateFinishedTrialError:
                    return  # another host's recovery failed it meanwhile
                if not (requeue_as and not requeue_as[1]):  # a stop signal's re-queue is not the trial's failure
                    self.streak.add(state, note)

        retrying(tell, what=f"trial {trial.number}")
        self.heartbeats.release(trial._trial_id)
        if self.streak.stopped() and not self.stop.is_set():
            self.errors.append(self.streak.stopped())
            self.stop.set()

    def worker(self, slot: int) -> None:
        try:
            sampler = self.search.make_sampler(self.opts.seed + slot)
            study = retrying(lambda: optuna.load_study(
                study_name=self.study_name, storage=self.storage, sampler=sampler, pruner=self.search.pruner,
            ))  # fmt: skip
            while (trial := retrying(self.next_trial, study)) is not None or self.others_running(study):
                if trial is None:  # another process runs the last points: wait, and take them over if it dies
                    self.stop.wait(min(2.0, self.opts.heartbeat))
                    continue
                try:
                    TrialRun(self, study, slot).run(trial)
                except Exception as error:  # a bug or a storage failure: the trial is failed, not stranded
                    reason = f"sweep runner error: {storage.error_line(error)}"
                    self.finish(study, trial, TrialState.FAIL, reason=reason)
                finally:
                    self.heartbeats.release(trial._trial_id)
        except Exception as error:  # reported by the main thread; a trial left RUNNING is recovered later
            self.errors.append(f"worker {slot} stopped: {storage.error_line(error)}")

    def run(self, on_tick=None) -> None:
        threads = [threading.Thread(target=self.worker, args=(slot,), daemon=True) for slot in range(self.opts.workers)]
        self.heartbeats.start()
        try:
            for thread in threads:
                thread.start()
                time.sleep(0.2)  # stagger the first asks
            while any(thread.is_alive() for thread in threads):
                if on_tick:
                    self.quietly(on_tick, self.study)
                time.sleep(0.5)
        finally:
            self.heartbeats.close()
            self.starter.close()
            self.lock.close()
        if on_tick:
            self.quietly(on_tick, self.study)


def name_study(opts: SweepOptions, sweep: dict, suffix: str = "") -> None:
    """Set `opts.study_name` (--study_name, else the file's `name:` or file name, plus the --set values) and
    `opts.storage` (default: the one SQLite database of the sweep file, shared by its --set studies, so one
    optuna-dashboard shows them side by side)."""
    base = base_name(opts, sweep)
    check_name("study name (--study_name, the sweep file's `name:` or its file name)", base)
    if opts.storage is None:
        opts.storage = storage_url(opts, base)
    if suffix and not opts.study_name:
        opts.study_name = f"{base}-{suffix}"
    opts.study_name = opts.study_name or base
    check_name("study name", opts.study_name)


def run_sweep(opts: SweepOptions) -> optuna.Study:
    """Run (or resume) the sweep with a live status line, then print the trial table. Exits 130 / 143 on
    SIGINT / SIGTERM (trials re-queued), 1 if grid points are left unfinished or a worker stopped."""
    check_options(opts)
    sweep, suffix = apply_overrides(sf.load_sweep(opts.file), opts.set.split(",") if opts.set else [])
    if opts.devices_per_trial is None:  # GPUs per trial by default: one, unless the sweep file asks for more
        check_devices(opts, sweep)
    name_study(opts, sweep, suffix)

    from rich.console import Console

    from pe_sweeps.tracking.compare import print_comparison
    from pe_sweeps.tracking.sweep_display import LiveStatus, trial_table, where_lines

    runner = Sweep(sweep, opts)
    handlers = {sig: signal.signal(sig, runner.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    console = Console()
    try:
        with LiveStatus(console, runner.url) as live:
            runner.run(on_tick=live.tick)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    study = runner.study
    if runner.stop_signal:
        stopped = sum("stopped by" in t.user_attrs.get("reason", "") and t.user_attrs.get("token") == TOKEN
                      for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))  # fmt: skip
        print(f"error: sweep {study.study_name} stopped by {runner.stop_signal_name()}: {stopped} running trial(s) "
              "stopped and re-queued; run the same command again to resume", file=sys.stderr)  # fmt: skip
        raise SystemExit(128 + runner.stop_signal)
    console.print()
    console.print(trial_table(study, runner.search.metrics))
    print_comparison(opts.out_dir, study.study_name, runner.search.metrics, console=console)
    for line in where_lines(runner.url, layout.study_dir(opts.out_dir, study.study_name)):
        console.print(line, highlight=False, soft_wrap=True)
    for error in runner.errors:
        print(f"error: {error}", file=sys.stderr)
    with runner.lock:  # a failed trial that promised a retry it lacks is unfinished, not failed for good
        retrying(lambda: repair_promised_retries(study, study.get_trials(deepcopy=False), opts.max_retries))
    left = unfinished_points(study, sweep) if sweep["method"] == "grid" else []
    if left:
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in left[:10])
        print(f"error: sweep {study.study_name}: {len(left)} grid point(s) neither finished nor failed for good "
              f"({shown}); run the same command again to finish them", file=sys.stderr)  # fmt: skip
    if nothing_succeeded(study):
        print(nothing_succeeded(study), file=sys.stderr)
    if left or runner.errors or nothing_succeeded(study):
        raise SystemExit(1)
    return study
