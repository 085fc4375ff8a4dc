"""`cli.py sweep FILE`: run a W&B sweep file with Optuna, offline, resumable and in parallel.

Each trial runs the file's `command` as a child process, expanded exactly as `wandb agent` expands it
(W&B's own `create_sweep_command*` helpers), so the child is the same `cli.py fit` an agent starts
and may itself use DDP. The child writes its run record (tracking/records.py) at every validation;
this process reads it, reports each value of the sweep metric to the trial (step = validation index,
W&B's hyperband "iteration") and stops the child when the pruner says so.

Resuming: the study lives in SQLite under the output directory (or `--storage postgresql://...`).
Finished trials are never repeated. A trial whose sweep process died is found either at once (same
host, its pid is gone) or by Optuna's heartbeat (any host), marked failed and re-queued with
`RetryHeartbeatStaleTrialCallback`; the retry resumes from the dead trial's last checkpoint.
"""

import ctypes
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import optuna
import sqlalchemy
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

from lightning_modules.errors import ConfigError
from tracking import sweep_file as sf
from tracking.records import RECORD_FILE
from tracking.search import Search, build_search

QUEUED = "pe_queued"  # system attr of grid points queued at study creation (and of their retries)

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


@dataclass
class SweepOptions:
    """Options of `cli.py sweep`."""

    file: str
    study_name: str | None = None  # default: the sweep file's name
    storage: str | None = None  # default: sqlite:///<out_dir>/sweeps/<study>/optuna.db
    workers: int = 1  # trials run in parallel by this process
    devices_per_trial: int = 0  # GPUs given to each trial (CUDA_VISIBLE_DEVICES); 0 = CPU threads
    out_dir: str = "out"
    seed: int = 0  # sampler seed
    heartbeat: int = 10  # seconds between heartbeats; a trial silent for 3x this is dead
    max_retry: int = 2  # times a dead trial is re-queued
    set: str | None = None  # KEY=VALUE[,KEY=VALUE]: fix parameters (one study per value, e.g. per encoding)


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
        suffix.append(value)
    return sweep, "-".join(suffix)


def open_storage(opts: SweepOptions, study_name: str) -> optuna.storages.RDBStorage:
    url = opts.storage
    if url is None:
        path = Path(opts.out_dir) / "sweeps" / study_name / "optuna.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path.resolve()}"
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(
                url, engine_kwargs=engine, heartbeat_interval=opts.heartbeat, grace_period=3 * opts.heartbeat,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=opts.max_retry),
            )  # fmt: skip
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as error:
            # Two hosts starting on an empty database both create Optuna's tables; the loser of that race
            # gets a duplicate-key error and only has to open the tables the winner made.
            failure = error
            time.sleep(0.5 + attempt)
        except (sqlalchemy.exc.SQLAlchemyError, ImportError) as error:
            failure = error
            break
    shown = sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)  # never print a password
    reason = str(failure).strip().splitlines()[0][:200]
    raise ConfigError(f"cannot open sweep storage {shown}: {reason}") from None


def open_study(sweep: dict, opts: SweepOptions, storage, study_name: str, search: Search | None = None) -> optuna.Study:
    """Create the study (queueing every grid point once) or load it, checking it is the same sweep."""
    search = search or build_search(sweep, study_name)
    digest = hashlib.sha256(json.dumps(sweep, sort_keys=True).encode()).hexdigest()[:16]
    kwargs = {"study_name": study_name, "storage": storage, "sampler": search.make_sampler(opts.seed)}
    try:
        study = optuna.create_study(directions=search.directions, pruner=search.pruner, **kwargs)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(pruner=search.pruner, **kwargs)
        attrs = wait_until_ready(study)
        if attrs.get("sweep_digest") != digest:
            raise ConfigError(
                f"study {study_name!r} was made from a different sweep file; pass --study_name to start a new one"
            ) from None
        return study
    study.set_user_attr("sweep_digest", digest)
    study.set_user_attr("sweep", sweep)
    if sweep["method"] == "grid":
        queue_grid(study, sweep)
    study.set_user_attr("ready", True)  # another process may now join
    return study


def queue_grid(study: optuna.Study, sweep: dict) -> None:
    """Queue every grid point once, tagged with its GridSampler grid id: workers in any process then pop
    distinct points atomically (a plain GridSampler may hand the same point to two workers)."""
    space = {n: s["values"] for n, s in sweep["parameters"].items() if "values" in s}
    distributions = {n: CategoricalDistribution(v) for n, v in space.items()}
    for grid_id, point in enumerate(sf.grid_points(sweep)):
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
    macros.update(env=["/usr/bin/env"], interpreter=[sys.executable], program=[sweep.get("program", "cli.py")],
                  args_json_file=[str(json_file)])  # fmt: skip
    argv = []
    for chunk in map(str, command):
        argv += macros.get(chunk[2:-1]) or [] if chunk.startswith("${") and chunk.endswith("}") else [chunk]
    return argv


def child_env(study_name: str, trial_dir: Path, slot: int, opts: SweepOptions) -> dict:
    # PE_OUT_ROOT: where `--model.init_from=run:NAME` looks, so trials find runs of earlier sweeps
    env = {**os.environ, "PE_OUT_DIR": str(trial_dir), "PE_OUT_ROOT": str(opts.out_dir), "PE_SWEEP": study_name}
    if opts.devices_per_trial:
        first = slot * opts.devices_per_trial
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(opts.devices_per_trial))
    else:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // opts.workers))
    return env


def _die_with_parent() -> None:
    """Child side: get SIGTERM when the sweep process dies (even by kill -9), so no orphan trains on."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def latest_record(trial_dir: Path) -> dict | None:
    paths = sorted(trial_dir.glob(f"runs/*/{RECORD_FILE}"), key=lambda p: p.stat().st_mtime)
    try:
        return json.loads(paths[-1].read_text()) if paths else None
    except json.JSONDecodeError:  # caught mid-replace on a file system without atomic rename
        return None


def resume_checkpoint(study: optuna.Study, trial: optuna.Trial) -> Path | None:
    """The last checkpoint of the dead trial this one retries, if any."""
    number = RetryHeartbeatStaleTrialCallback.retried_trial_number(study._storage.get_trial(trial._trial_id))
    if number is None:
        return None
    dead_dir = study.trials[number].user_attrs.get("trial_dir")
    checkpoints = sorted(Path(dead_dir).glob("runs/*/checkpoints/last.ckpt")) if dead_dir else []
    return checkpoints[-1] if checkpoints and readable(checkpoints[-1]) else None


def readable(checkpoint: Path) -> bool:
    """False for a checkpoint cut short by the kill (the retry then starts from scratch)."""
    import torch

    try:
        torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=False)
        return True
    except Exception:  # truncated zip, partial write: any failure to open means "do not resume"
        return False


class TrialRun:
    """One trial: start the child, stream its metric into the trial, prune, and tell the result."""

    def __init__(self, study: optuna.Study, sweep: dict, opts: SweepOptions, slot: int, search: Search | None = None):
        self.study, self.sweep, self.opts, self.slot = study, sweep, opts, slot
        self.search = search or build_search(sweep, study.study_name)
        self.metric = self.search.metrics[0]  # the one streamed to the pruner (single-objective only)

    def run(self, trial: optuna.Trial) -> None:
        params = self.search.draw(trial)
        trial_dir = Path(self.opts.out_dir).resolve() / "sweeps" / self.study.study_name / f"trial-{trial.number}"
        trial_dir.mkdir(parents=True, exist_ok=True)
        for key, value in {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "trial_dir": str(trial_dir),
        }.items():
            trial.set_user_attr(key, value)
        argv = build_command(self.sweep, params, trial_dir)
        retried = RetryHeartbeatStaleTrialCallback.retried_trial_number(self.study._storage.get_trial(trial._trial_id))
        if retried is not None:
            trial.set_user_attr("reason", f"retry of trial {retried}")
            if self.adopt_finished(trial, retried):
                return
        checkpoint = resume_checkpoint(self.study, trial)
        if checkpoint:
            argv.append(f"--ckpt_path={checkpoint}")
            trial.set_user_attr("resumed_from", str(checkpoint))
        trial.set_user_attr("command", " ".join(argv))
        env = {**child_env(self.study.study_name, trial_dir, self.slot, self.opts), **sf.wandb_env(self.sweep)}
        with open(trial_dir / "output.log", "ab") as log:
            child = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            pruned = self.follow(trial, child, trial_dir)
        self.tell(trial, child.returncode, pruned, latest_record(trial_dir), trial_dir)

    def adopt_finished(self, trial: optuna.Trial, retried: int) -> bool:
        """If the dead trial's child finished its run after the sweep died, take its result: no rerun."""
        dead_dir = self.study.trials[retried].user_attrs.get("trial_dir")
        record = latest_record(Path(dead_dir)) if dead_dir else None
        if not record or record.get("status") != "finished" or not finite(record.get("final", {}), self.search.metrics):
            return False
        trial.set_user_attr("reason", f"trial {retried}'s run finished after its sweep died; result adopted")
        trial.set_user_attr("trial_dir", dead_dir)
        self.tell(trial, 0, False, record, Path(dead_dir))
        return True

    def follow(self, trial: optuna.Trial, child: subprocess.Popen, trial_dir: Path) -> bool:
        """Wait for the child; report each new value of the metric; True if it was pruned."""
        reported, beat = 0, 0.0
        try:
            while child.poll() is None:
                if time.monotonic() - beat > self.opts.heartbeat:
                    self.study._storage.record_heartbeat(trial._trial_id)
                    beat = time.monotonic()
                values = self.report(trial, trial_dir, reported)
                reported = len(values)
                if values and not self.search.multi_objective and trial.should_prune():
                    child.terminate()
                    child.wait()
                    return True
                time.sleep(1.0)
        except BaseException:
            child.terminate()
            child.wait()
            raise
        self.report(trial, trial_dir, reported)  # validations written between the last poll and the exit
        return False

    def report(self, trial: optuna.Trial, trial_dir: Path, reported: int) -> list[float]:
        """Report the metric's values after the first `reported` (step = validation index); all values.
        A multi-objective trial reports nothing: Optuna's intermediate values feed pruners, single-objective."""
        if self.search.multi_objective:
            return []
        record = latest_record(trial_dir) or {"history": []}
        values = [h[self.metric] for h in record["history"] if self.metric in h]
        for step in range(reported, len(values)):
            trial.report(values[step], step + 1)
        return values

    def tell(self, trial, returncode: int, pruned: bool, record: dict | None, trial_dir: Path) -> None:
        final = (record or {}).get("final", {})
        if pruned:
            reported = self.study._storage.get_trial(trial._trial_id).intermediate_values  # a live Trial has none
            trial.set_user_attr("reason", f"pruned at validation {len(reported)}")
            self.study.tell(trial, state=TrialState.PRUNED)
        elif returncode == 0 and finite(final, self.search.metrics):
            values = [final[m] for m in self.search.metrics]
            self.study.tell(trial, values if self.search.multi_objective else values[0])
        else:
            missing = next((m for m in self.search.metrics if not finite(final, [m])), self.metric)
            trial.set_user_attr("reason", failure_reason(returncode, record, missing, trial_dir))
            self.study.tell(trial, state=TrialState.FAIL)


def finite(final: dict, metrics: list[str]) -> bool:
    """Every objective was logged and none is NaN."""
    return all(m in final and final[m] == final[m] for m in metrics)


def failure_reason(returncode: int, record: dict | None, metric: str, trial_dir: Path) -> str:
    """One line: why a trial failed (diverged, raised, or never logged the sweep metric)."""
    if record and record.get("error"):
        return f"{record['status']}: {record['error']}"[:300]
    if returncode == 0:
        logged = sorted((record or {}).get("final", {}))
        return f"metric {metric!r} was not logged (or is NaN); logged: {', '.join(logged[:12]) or 'nothing'}"
    lines = (trial_dir / "output.log").read_text(errors="replace").strip().splitlines()
    return f"exit code {returncode}: {lines[-1] if lines else 'no output'}"[:300]


def recover_dead_trials(study: optuna.Study, max_retry: int) -> None:
    """Fail and re-queue RUNNING trials whose sweep process is gone: at once on this host (pid check),
    and on any host once their heartbeat is stale (Optuna's own check)."""
    host = socket.gethostname()
    retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.user_attrs.get("host") == host and not _alive(trial.user_attrs.get("pid", -1)):
            study._storage.set_trial_user_attr(trial._trial_id, "reason", "sweep process died; re-queued")
            if study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                retry(study, study._storage.get_trial(trial._trial_id))
    optuna.storages.fail_stale_trials(study)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def budget_left(study: optuna.Study, sweep: dict) -> bool:
    """Fewer trials started than the budget (run_cap, for every method; a dead trial that was re-queued
    counts once, through its retry), and for a grid, queued points remain."""
    trials = study.get_trials(deepcopy=False)
    retried = {RetryHeartbeatStaleTrialCallback.retried_trial_number(t) for t in trials}
    started = [t for t in trials if t.number not in retried and t.state != TrialState.WAITING]
    if sweep["method"] == "grid":  # not the trials that lost a race for the last point (failed at once)
        started = [t for t in started if QUEUED in t.system_attrs]
    budget = sf.trial_budget(sweep)
    if budget is not None and len(started) >= budget:
        return False
    return sweep["method"] != "grid" or any(t.state == TrialState.WAITING for t in trials)


class Sweep:
    """Workers that ask the study for trials and run them until the budget is spent."""

    def __init__(self, sweep: dict, opts: SweepOptions):
        self.sweep, self.opts = sweep, opts
        self.study_name = opts.study_name or Path(opts.file).stem
        self.search = build_search(sweep, self.study_name)
        self.storage = open_storage(opts, self.study_name)
        self.study = open_study(sweep, opts, self.storage, self.study_name, self.search)
        self.lock = threading.Lock()  # asks are serialised within this process
        self.errors: list[BaseException] = []

    def next_trial(self, study: optuna.Study) -> optuna.Trial | None:
        with self.lock:
            recover_dead_trials(study, self.opts.max_retry)
            if not budget_left(study, self.sweep):
                return None
            if self.search.terminator and self.search.terminator(study):  # the optimizer factory's stop rule
                return None
            trial = study.ask()
            queued = QUEUED in study._storage.get_trial(trial._trial_id).system_attrs
            if self.sweep["method"] == "grid" and not queued:
                trial.set_user_attr("reason", "grid already covered by other workers")
                study.tell(trial, state=TrialState.FAIL)  # lost a race for the last queued point
                return None
            return trial

    def worker(self, slot: int) -> None:
        try:
            sampler = self.search.make_sampler(self.opts.seed + slot)
            study = optuna.load_study(
                study_name=self.study_name, storage=self.storage, sampler=sampler, pruner=self.search.pruner
            )
            while (trial := self.next_trial(study)) is not None:
                TrialRun(study, self.sweep, self.opts, slot, self.search).run(trial)
        except BaseException as error:  # reported by the main thread
            self.errors.append(error)

    def run(self, on_tick=None) -> None:
        threads = [threading.Thread(target=self.worker, args=(slot,), daemon=True) for slot in range(self.opts.workers)]
        for thread in threads:
            thread.start()
            time.sleep(0.2)  # stagger the first asks
        while any(thread.is_alive() for thread in threads):
            if on_tick:
                on_tick(self.study)
            time.sleep(1.0)
        if on_tick:
            on_tick(self.study)
        if self.errors:
            raise self.errors[0]


def run_sweep(opts: SweepOptions) -> optuna.Study:
    """Run (or resume) the sweep with a live status line, then print the trial table."""
    from rich.console import Console

    from tracking.compare import print_comparison
    from tracking.sweep_display import LiveStatus, trial_table

    sweep, suffix = apply_overrides(sf.load_sweep(opts.file), opts.set.split(",") if opts.set else [])
    if suffix and not opts.study_name:
        opts.study_name = f"{Path(opts.file).stem}-{suffix}"
    if opts.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {opts.workers}")
    runner = Sweep(sweep, opts)
    console = Console()
    with LiveStatus(console) as live:
        runner.run(on_tick=live.tick)
    console.print()
    console.print(trial_table(runner.study, runner.search.metrics))
    print_comparison(opts.out_dir, runner.study.study_name, runner.search.metrics, console=console)
    return runner.study
