"""`cli.py sweep` end to end on seconds-long trials: resume, kill -9, failures, NaN, parallel workers, and every
method on a fake trial program.

Claims of docs/sweeps.md covered here:
- "Resume: run the same command again. Finished trials are never repeated":
  test_sweep_runs_and_resumes_without_repeating
- "a grid is queued once ... workers ... take distinct points": test_two_workers_never_repeat_a_grid_point,
  test_two_processes_share_a_postgres_study
- "Dead trials ... found at once on the same host (its pid is gone) ... the retry resumes from the dead run's
  last.ckpt": test_kill_9_then_rerun_resumes_the_dead_trial_from_its_checkpoint
- "... or by Optuna's heartbeat from any host (--heartbeat; stale after 3x)":
  test_stale_heartbeat_of_a_trial_from_another_host_is_retried
- "Failures: a trial that raises or diverges is recorded failed with a one-line reason":
  test_failing_and_diverging_trials_are_recorded_and_the_sweep_goes_on
- "DDP inside a trial ... one record": test_ddp_trial_in_a_sweep
- "Dashboard: optuna-dashboard sqlite:///...": test_optuna_dashboard_lists_the_trials
- "random -> RandomSampler, bayes -> TPESampler ... run_cap -> trial budget", "project ... -> the runs' W&B
  project": test_random_and_bayes_sweeps_run_end_to_end, test_run_cap_bounds_a_grid_sweep
- "hyperband ... HyperbandPruner with one resource unit per validation":
  test_hyperband_prunes_a_trial_that_is_worse_at_the_first_rung
- "the same cli.py fit an agent would start": test_every_sweep_command_parses_with_cli
- "Launchers: ... placement variables never reach them": test_trials_never_see_the_launchers_rank_variables,
  test_a_sweep_launched_as_task_1_trains_its_trial_as_a_job_of_its_own, test_ddp_trial_in_a_sweep[sbatch-one-task]
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import TINY
from helpers import cli_in_process, fresh_postgres_database, kill_once_started
from optuna.trial import TrialState

from pe_sweeps.layout import FAULT_ENV
from pe_sweeps.storages.storage import grace_period
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.recovery import OWNER, owner_of
from pe_sweeps.sweep.trial_child import build_command

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def tiny_sweep(tmp_path, parameters: dict, name="s", **extra) -> Path:
    sweep = {
        "program": str(ROOT / "cli.py"), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": parameters, "command": ["${env}", "${interpreter}", "${program}", "fit", *TINY, "${args}"],
        **extra,
    }  # fmt: skip
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def sweep_cmd(path: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={out}", *extra]


def run_sweep(path, out, *extra, check=True, env=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", **(env or {})}
    result = subprocess.run(sweep_cmd(path, out, *extra), cwd=ROOT, env=env, capture_output=True, text=True)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def trials(out: Path, name="s") -> list[optuna.trial.FrozenTrial]:
    """The trials of study `name`, in whichever database under out/sweeps holds it (a sweep file's studies
    share one)."""
    for path in sorted((out / "sweeps").glob("*/optuna.db")):
        storage = f"sqlite:///{path}"
        if name in optuna.get_all_study_names(storage):
            return optuna.load_study(study_name=name, storage=storage).trials
    raise KeyError(name)


def complete_points(ts) -> list[tuple]:
    return sorted(tuple(sorted(t.params.items())) for t in ts if t.state == TrialState.COMPLETE)


# how trials start: cli.py trials start warm by default (sweep/warm_start.py); both paths are tested
START = {"cold": ["--cold_start"], "warm": []}


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_sweep_runs_and_resumes_without_repeating(tmp_path, start):
    path = tiny_sweep(
        tmp_path, {"model.arch.encoding": {"values": ["rope", "alibi"]}, "seed_everything": {"values": [0]}}
    )
    result = run_sweep(path, tmp_path, *START[start])
    assert "sweep s: val/acc" in result.stdout and "encoding=alibi" in result.stdout
    first = trials(tmp_path)
    assert [t.state for t in first] == [TrialState.COMPLETE] * 2
    assert all(len(t.intermediate_values) == 2 for t in first)  # one report per validation
    assert {t.user_attrs["start"] for t in first} == {start}
    # the final metrics the sweep does not optimise are user attributes, which optuna-dashboard shows
    assert all(t.user_attrs["final/val/acc"] == t.value and "final/val/acc_ood" in t.user_attrs for t in first)
    assert not any("_len_" in key for t in first for key in t.user_attrs)
    run_sweep(path, tmp_path, *START[start])
    assert len(trials(tmp_path)) == 2  # nothing new started


def stopped(pid: int) -> bool:
    """Whether process `pid` is frozen (state T in /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def trial_pid(run_dir: Path) -> int:
    """The pid of the `cli.py fit` that writes `run_dir` (<name>-<date>-<time>-<pid>), cold or forked warm."""
    return int(run_dir.name.rsplit("-", 1)[1])


# warm only (the default start path): the resume is the child's (`cli.py fit` from its checkpoint), the same however
# it was started; the cold path's kill and resume are tested in test_faults.py (58 s of the suite saved)
@pytest.mark.parametrize("start", ["warm"])
def test_kill_9_then_rerun_resumes_the_dead_trial_from_its_checkpoint(tmp_path, start):
    """The sweep is killed while trial 0's child is frozen (SIGSTOP, at the failpoint after its first checkpoint,
    mid-training) with a readable checkpoint, so the dead trial can neither finish nor be adopted: the re-run
    must fail it, re-queue it and resume its run from that checkpoint (the resumed run's first step is the
    checkpoint's step + 1)."""
    import torch

    grid = {"model.arch.encoding": {"values": ["rope", "alibi", "none"]}}
    path = tiny_sweep(tmp_path, grid)
    env = {**os.environ, "WANDB_MODE": "disabled", FAULT_ENV: "step:after_checkpoint@stop"}
    sweep = subprocess.Popen(sweep_cmd(path, tmp_path, *START[start]), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    checkpoint, deadline = None, time.time() + 180
    while checkpoint is None:
        assert time.time() < deadline and sweep.poll() is None, "trial 0 never reached a checkpoint"
        found = list((tmp_path / "sweeps" / "s").glob("trial-0/runs/*/checkpoints/last.ckpt"))
        child = trial_pid(found[0].parents[1]) if found else None
        if found and stopped(child):
            checkpoint = found[0]
        time.sleep(0.05)
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    os.kill(child, signal.SIGKILL)
    step = torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"]
    (running,) = [t for t in trials(tmp_path) if t.state == TrialState.RUNNING]
    assert running.number == 0
    run_sweep(path, tmp_path, *START[start])
    ts = trials(tmp_path)
    assert {t.user_attrs["start"] for t in ts if "start" in t.user_attrs} == {start}
    assert complete_points(ts) == sorted({(("model.arch.encoding", e),) for e in ["rope", "alibi", "none"]})
    dead = [t for t in ts if t.state == TrialState.FAIL]
    assert [t.number for t in dead] == [0] and "died" in dead[0].user_attrs["reason"]
    (retry,) = [t for t in ts if t.state == TrialState.COMPLETE and t.params == dead[0].params]
    assert retry.user_attrs["reason"].startswith("retry of trial 0: sweep process died (host ")
    assert retry.user_attrs["resumed_from"] == str(checkpoint)
    (record,) = Path(retry.user_attrs["trial_dir"]).glob("runs/*/record.json")
    resumed = json.loads(record.read_text())
    assert resumed["status"] == "finished" and resumed["first_step"] == step + 1 > 1


def backdate_heartbeat(db: Path, trial_id: int, seconds: float) -> None:
    """Move a trial's last heartbeat in an SQLite study `seconds` into the past: what waiting that long after its
    sweep died leaves (Optuna compares it with the database's clock)."""
    import sqlite3
    from datetime import datetime, timedelta

    with sqlite3.connect(db) as connection:
        (beat,) = connection.execute(
            "SELECT heartbeat FROM trial_heartbeats WHERE trial_id = ?", (trial_id,)
        ).fetchone()
        earlier = datetime.fromisoformat(beat) - timedelta(seconds=seconds)
        connection.execute("UPDATE trial_heartbeats SET heartbeat = ? WHERE trial_id = ?", (str(earlier), trial_id))


def test_stale_heartbeat_of_a_trial_from_another_host_is_retried(tmp_path):
    """Process A runs a long fake trial with a 1 s heartbeat and is killed; its trial is made to look like
    another host's (so the same-host pid check cannot see it). Process B, started once the heartbeat is older
    than the grace period (3 x 1 s + the SQLite busy timeout), must fail it through Optuna's stale-heartbeat
    check and run its retry."""
    path = fake_sweep(tmp_path, "grid", {"x": {"values": [0.5]}}, "--mode=quadratic", "--steps=200", "--pause=0.5")
    env = {**os.environ, "WANDB_MODE": "disabled"}
    first = subprocess.Popen(sweep_cmd(path, tmp_path, "--heartbeat=1"), cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    started = lambda: list((tmp_path / "sweeps" / "s").glob("trial-0/runs/*/record.json"))  # noqa: E731
    kill_once_started(first, started, 120, "the first trial never started")
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'sweeps' / 's' / 'optuna.db'}")
    (running,) = [t for t in trials(tmp_path) if t.state == TrialState.RUNNING]
    storage.set_trial_user_attr(running._trial_id, "host", "another-host")
    owner = {**owner_of(running.user_attrs), "host_id": "another-host"}  # host_id: what the same-host check compares
    storage.set_trial_user_attr(running._trial_id, OWNER, owner)
    # the heartbeat made stale, the state any other host would see after the grace period, without waiting it
    backdate_heartbeat(tmp_path / "sweeps" / "s" / "optuna.db", running._trial_id, grace_period(1) + 1.0)
    fast = {**env, "FAKE_STEPS": "1"}
    second = subprocess.run(sweep_cmd(path, tmp_path, "--heartbeat=1"), cwd=ROOT, env=fast, capture_output=True,
                            text=True)  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    ts = sorted(trials(tmp_path), key=lambda t: t.number)
    assert [t.state for t in ts] == [TrialState.FAIL, TrialState.COMPLETE]
    assert "died" not in ts[0].user_attrs.get("reason", "")  # not the same-host pid path
    assert optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(ts[1]) == 0
    assert ts[1].value == pytest.approx(-0.04)


def test_failing_and_diverging_trials_are_recorded_and_the_sweep_goes_on(tmp_path):
    grid = {"model.arch.dim": {"values": [30, 32]}, "model.lr": {"values": [0.001, 1e30]}}  # dim 30: 4 heads
    path = tiny_sweep(tmp_path, grid)
    result = run_sweep(path, tmp_path, check=False)
    # every point ran; the ones that failed for good are named in one line, exit 1 (issue 42, point 4)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 1 and len(errors) == 1, result.stderr[-3000:]
    assert "3 grid point(s) failed for good" in errors[0] and "--retry_failed" in errors[0]
    by_point = {(t.params["model.arch.dim"], t.params["model.lr"]): t for t in trials(tmp_path)}
    assert by_point[(32, 0.001)].state == TrialState.COMPLETE
    assert by_point[(30, 0.001)].state == TrialState.FAIL
    assert "not divisible by num_heads" in by_point[(30, 0.001)].user_attrs["reason"]
    diverged = by_point[(32, 1e30)]
    assert diverged.state == TrialState.FAIL and diverged.user_attrs["reason"].startswith("diverged: ")


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_a_set_value_the_fit_parser_rejects_stops_the_sweep_at_the_first_trial(tmp_path, start):
    """Issue 30's SUBJ run, misspelt: `--set data.preset=subjj` failed 11 trials alike (each naming `-c fit
    --help` when warm) before the failure streak stopped the sweep; now the first failure stops it, exit 2."""
    path = tiny_sweep(tmp_path, {"data.task": {"values": ["copy"]}, "seed_everything": {"values": [1, 2, 3]}})
    result = run_sweep(path, tmp_path, "--set=data.task=copyy", *START[start], check=False)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(errors) == 1 and errors[0].startswith("error: stopped at the first failed trial"), errors
    assert "the same --data.task=copyy (a --set value" in errors[0] and "rejects it: --data.task: expected" in errors[0]
    states = [t.state for t in trials(tmp_path, "s-copyy")]
    assert states.count(TrialState.FAIL) == 1 and states.count(TrialState.WAITING) == 2  # the rest stay queued


def test_two_workers_never_repeat_a_grid_point(tmp_path):
    grid = {"model.arch.encoding": {"values": ["rope", "alibi", "none", "learned"]}}
    path = tiny_sweep(tmp_path, grid)
    run_sweep(path, tmp_path, "--workers=2")
    ts = trials(tmp_path)
    points = complete_points(ts)
    assert len(points) == 4 == len(set(points))
    assert all(t.state == TrialState.COMPLETE for t in ts)


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_every_sweep_command_parses_with_cli(path, tmp_path, capsys, monkeypatch):
    sweep = sf.load_sweep(path)
    study = optuna.create_study(sampler=sf.sampler(sweep))
    for point in sf.grid_points(sweep)[:50] if sweep["method"] == "grid" else [{}]:
        study.enqueue_trial(point)
    trial = study.ask()
    params = {n: sf.suggest(trial, n, s, sweep["method"]) for n, s in sweep["parameters"].items()}
    argv = build_command(sweep, params, tmp_path)
    assert argv[:2] == ["/usr/bin/env", sys.executable]
    assert argv[2] == str(ROOT / "cli.py") or argv[2] == "cli.py", argv
    code, out, err = cli_in_process([*argv[3:], "--print_config"], capsys, monkeypatch, ROOT)
    assert code == 0, err[-2000:]
    config = yaml.safe_load(out)
    for key, value in params.items():
        node = config
        for part in key.split("."):
            node = node[part] if part in node else node["init_args"][part]
        parsed = yaml.safe_load(value) if isinstance(value, str) else value  # "{}": a mapping, as the CLI reads it
        # a mapping given to a dataclass option (`model.arch`: "{encoding: rope, qk_norm: true}") is merged into the
        # configs' value: each key it names has its value; a dict option ("{}" encoding_options) is replaced
        overlay = isinstance(parsed, dict) and parsed and {k: node.get(k) for k in parsed} == parsed
        assert node == parsed or overlay, key


def test_bad_sweep_file_is_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "bad.yaml"
    path.write_text("method: evolution\nmetric: {name: val/acc}\nparameters: {x: {values: [1]}}\n")
    code, _, err = cli_in_process(["sweep", str(path), f"--out_dir={tmp_path}"], capsys, monkeypatch, ROOT)
    assert code == 2
    assert (
        err.strip()
        == "error: sweep file " + str(path) + ": method 'evolution'; choose one of: grid, random, bayes, custom"
    )


@pytest.fixture
def empty_postgres():
    """A new, empty database on the test server, so both sweep processes race to create Optuna's tables
    (as two hosts starting on a fresh database do)."""
    yield from fresh_postgres_database("pe_test")


def test_two_processes_share_a_postgres_study(tmp_path, empty_postgres):
    url, name = empty_postgres, "pg"
    path = tiny_sweep(tmp_path, {"model.arch.encoding": {"values": ["rope", "alibi", "none", "learned"]}})
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    cmd = sweep_cmd(path, tmp_path, f"--storage={url}", f"--study_name={name}")
    workers = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]  # fmt: skip
    outputs = [w.communicate(timeout=600) for w in workers]
    assert all(w.returncode == 0 for w in workers), [o[1][-2000:] for o in outputs]
    ts = optuna.load_study(study_name=name, storage=url).trials
    assert len(complete_points(ts)) == 4 == len(set(complete_points(ts)))
    hosts_pids = {owner_of(t.user_attrs)["pid"] for t in ts if t.state == TrialState.COMPLETE}
    assert len(hosts_pids) == 2, "both processes should have run trials"


def test_optuna_dashboard_lists_the_trials(tmp_path):
    import json
    import socket
    import urllib.request

    path = tiny_sweep(tmp_path, {"model.arch.encoding": {"values": ["rope"]}})
    run_sweep(path, tmp_path)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    storage = f"sqlite:///{tmp_path / 'sweeps' / 's' / 'optuna.db'}"
    command = [
        str(Path(sys.executable).parent / "optuna-dashboard"),
        storage,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    dashboard = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, studies = time.time() + 60, None
        while studies is None and time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2) as response:
                    studies = json.load(response)["study_summaries"]
            except OSError:
                time.sleep(0.5)
        (study,) = [s for s in studies if s["study_name"] == "s"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{study['study_id']}", timeout=5) as r:
            detail = json.load(r)
        assert detail["name"] == "s"
        assert len(detail["trials"]) == 1 and detail["trials"][0]["state"] == "Complete"
    finally:
        dashboard.terminate()
        dashboard.wait()


ONE_TASK_JOB = {
    "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_ID": "7",
    "SLURM_JOB_NAME": "sweep", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1",
}  # fmt: skip


@pytest.mark.parametrize("launcher", [{}, ONE_TASK_JOB], ids=["shell", "sbatch-one-task"])
def test_ddp_trial_in_a_sweep(tmp_path, launcher):
    """A trial whose command uses 2 CPU processes (gloo DDP): one record, one result; also inside a one-task
    `sbatch` job, where Lightning would have refused 2 devices with --ntasks-per-node=1."""
    path = tiny_sweep(tmp_path, {"model.arch.encoding": {"values": ["alibi"]}, "trainer.devices": {"value": 2},
                                 "trainer.strategy": {"value": "ddp"}})  # fmt: skip
    run_sweep(path, tmp_path, env=launcher)
    (trial,) = trials(tmp_path)
    assert trial.state == TrialState.COMPLETE and len(trial.intermediate_values) == 2
    assert len(list((tmp_path / "sweeps" / "s").glob("trial-0/runs/*/record.json"))) == 1


def test_trials_search_the_whole_sweep_root_for_run_references(tmp_path):
    """A fine-tuning trial's `init_from: run:NAME` must find runs of another sweep under the same --out_dir."""
    from pe_sweeps.sweep.run import SweepOptions
    from pe_sweeps.sweep.trial_child import child_env

    env = child_env("s", tmp_path / "sweeps" / "s" / "trial-0", 0, SweepOptions(file="f.yaml", out_dir=str(tmp_path)))
    assert env["PE_OUT_ROOT"] == str(tmp_path) and env["PE_OUT_DIR"].endswith("trial-0")


# what `srun -n 2 python cli.py sweep ...` hands its task 1, and torchrun / Lightning's launcher their ranks
LAUNCHER = {
    "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_JOB_ID": "77",
    "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "1", "SLURM_JOB_NAME": "sweep", "SLURM_NODELIST": "node1",
    "RANK": "1", "LOCAL_RANK": "1", "GLOBAL_RANK": "1", "NODE_RANK": "0", "GROUP_RANK": "0", "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "r1",
    "PL_GLOBAL_SEED": "5",
}  # fmt: skip


def test_a_sweep_launched_as_task_1_trains_its_trial_as_a_job_of_its_own(tmp_path):
    """A real `cli.py fit` trial of a sweep started as SLURM task 1 of 2 (and a torchrun rank): Lightning
    saw rank 1 and made the W&B logger a rank-zero dummy ('function' object has no attribute 'update')."""
    path = tiny_sweep(tmp_path, {"model.arch.encoding": {"values": ["alibi"]}})
    run_sweep(path, tmp_path, env=LAUNCHER)
    (trial,) = trials(tmp_path)
    assert trial.state == TrialState.COMPLETE, trial.user_attrs.get("reason")


# --- every method end to end on a fake program (tests/fake_trial.py: starts in well under a second) -----------

FAKE = str(ROOT / "tests" / "fake_trial.py")


def fake_sweep(tmp_path, method: str, parameters: dict, *command_args: str, **extra) -> Path:
    sweep = {
        "program": FAKE, "method": method, "metric": {"name": "val/score", "goal": "maximize"},
        "parameters": parameters, "command": ["${env}", "${interpreter}", "${program}", *command_args, "${args}"],
        **extra,
    }  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def started(ts) -> list:
    return [t for t in ts if t.state != TrialState.WAITING]


def test_run_cap_bounds_a_grid_sweep(tmp_path):
    path = fake_sweep(tmp_path, "grid", {"x": {"values": [0.1, 0.2, 0.3]}}, "--mode=quadratic", run_cap=1)
    run_sweep(path, tmp_path)
    run_sweep(path, tmp_path)  # resuming does not start more: the cap counts the study's trials
    ts = trials(tmp_path)
    assert [t.state for t in started(ts)] == [TrialState.COMPLETE]
    assert started(ts)[0].params == {"x": 0.1}  # the first grid point, in file order


@pytest.mark.parametrize("method", ["random", "bayes"])
def test_random_and_bayes_sweeps_run_end_to_end(tmp_path, method):
    parameters = {"x": {"distribution": "uniform", "min": 0.0, "max": 1.0}, "n": {"values": [1, 2]}}
    path = fake_sweep(tmp_path, method, parameters, "--mode=quadratic", run_cap=4, project="pe-test-project")
    run_sweep(path, tmp_path)
    ts = trials(tmp_path)
    assert len(ts) == 4 and all(t.state == TrialState.COMPLETE for t in ts)
    assert len({t.params["x"] for t in ts}) == 4  # sampled, not a constant
    for t in ts:  # the value the runner read is the program's, for the parameters the sampler drew
        assert t.value == pytest.approx(-((t.params["x"] - 0.3) ** 2)) and t.params["n"] in (1, 2)
    paths = sorted((tmp_path / "sweeps" / "s").glob("trial-*/runs/*/record.json"))
    records = [yaml.safe_load(p.read_text()) for p in paths]
    assert len(records) == 4 and {r["wandb_project"] for r in records} == {"pe-test-project"}
    # issue 13: the trial's varied parameters reach its run (names, W&B config); the dashboard names the
    # objective and finds each trial's record, log and W&B run
    for r in records:
        assert json.loads(r["sweep_params"]).keys() == {"x", "n"}
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'sweeps' / 's' / 'optuna.db'}")
    assert study.metric_names == ["val/score"]
    for t in ts:
        assert t.user_attrs["record"] in map(str, paths) and t.user_attrs["wandb_run_id"] == f"fake-{t.number}"
        assert t.user_attrs["wandb_run_path"] == f"p/fake-{t.number}" and t.user_attrs["log"].endswith("output.log")


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_trials_never_see_the_launchers_rank_variables(tmp_path, start):
    path = fake_sweep(tmp_path, "grid", {"x": {"values": [0.1]}}, "--mode=quadratic", "--dump_env=1")
    run_sweep(path, tmp_path, "--cold_start" if start == "cold" else "--warm_any", env={**LAUNCHER, "KEEP": "me"})
    (trial,) = trials(tmp_path)
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["start"] == start
    seen = json.loads((tmp_path / "sweeps" / "s" / "trial-0" / "env.json").read_text())
    assert seen["KEEP"] == "me" and seen["PE_SWEEP"] == "s"
    assert sorted(set(LAUNCHER) & set(seen)) == []


def test_hyperband_prunes_a_trial_that_is_worse_at_the_first_rung(tmp_path):
    """One bracket (max_iter 2 < eta 3), first rung at validation 1: trial 0 scores 1 and finishes; every
    later trial scores 0 at validation 1, below the rung's best, and is stopped there."""
    early = {"type": "hyperband", "min_iter": 1, "max_iter": 2, "eta": 3}
    parameters = {"x": {"distribution": "uniform", "min": 0.0, "max": 1.0}}
    args = ("--mode=first_wins", "--steps=6", "--pause=0.5", "--step_size=50")  # validations at steps 50, 100, ...
    path = fake_sweep(tmp_path, "random", parameters, *args, run_cap=3, early_terminate=early)
    run_sweep(path, tmp_path)
    ts = sorted(trials(tmp_path), key=lambda t: t.number)
    assert [t.state for t in ts] == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.PRUNED]
    assert ts[0].value == 1.0 and sorted(ts[0].intermediate_values) == [50, 100, 150, 200, 250, 300]  # global steps
    for t in ts[1:]:  # the rungs still count validations (W&B's "iteration"), not steps
        assert t.user_attrs["reason"].startswith("pruned at validation") and t.intermediate_values[50] == 0.0
        assert len(t.intermediate_values) < 6  # stopped before its last validation


# ---------------------------------------------------------------- tune-then-reseed (sweep/reseed.py)

RESEED_PARAMS = {
    "model.arch.encoding": {"values": ["rope", "alibi"]},
    "data.task": {"values": ["copy"]},
    "model.lr": {"values": [0.001, 0.01]},
    "seed_everything": {"value": 0},
}


def reseed_sweep(tmp_path) -> Path:
    """The protocol on a fake trial program (tests/fake_reseed_trial.py): no model, a record in milliseconds."""
    command = ["${env}", "${interpreter}", "${program}", "${args}"]
    return tiny_sweep(tmp_path, RESEED_PARAMS, program=str(ROOT / "tests" / "fake_reseed_trial.py"), command=command)


def reseed_points(out: Path) -> list[tuple]:
    return complete_points(trials(out, "s-reseed"))


def test_reseed_protocol_end_to_end_and_rerun_starts_nothing(tmp_path):
    path = reseed_sweep(tmp_path)
    result = run_sweep(path, tmp_path, "--reseed=2", "--per=model.arch.encoding", "--workers=2")
    for group in ("rope", "alibi"):  # stage 1: the file's full grid per encoding
        assert len(complete_points(trials(tmp_path, f"s-{group}"))) == 2
    # one database for the file's studies (stages and groups), so optuna-dashboard shows them side by side
    assert [p.parent.name for p in (tmp_path / "sweeps").glob("*/optuna.db")] == ["s"]
    expected = sorted(
        (("data.task", "copy"), ("model.arch.encoding", e), ("model.lr", lr), ("seed_everything", s))
        for e, lr in (("rope", 0.01), ("alibi", 0.001)) for s in (1, 2)  # best lr per encoding, fresh seeds
    )  # fmt: skip
    assert reseed_points(tmp_path) == expected
    assert "stage 1: best configuration per group" in result.stdout and "lr=0.01" in result.stdout
    # each choice's stage-1 value beside its stage-2 mean over the fresh seeds (rope at lr 0.01: 0.8 on seed 0, then
    # 0.81 and 0.82 on seeds 1 and 2: tests/fake_reseed_trial.py)
    assert "stage 1 beside stage 2" in result.stdout and "0.8000 (1 seed)" in result.stdout
    assert "0.8150 (2 seeds)" in result.stdout and "+0.0150" in result.stdout
    assert "final val/acc, val/acc_ood (max/max)" in result.stdout  # both, side by side
    compare = subprocess.run([sys.executable, "cli.py", "compare", f"--out_dir={tmp_path}", "--sweep=s-reseed",
                              "--format=json"], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    comparisons = json.loads(compare.stdout)["comparisons"]  # the sweep's metric and its companion, as it ends
    assert [c["metric"] for c in comparisons] == ["val/acc", "val/acc_ood"]
    data = comparisons[0]
    assert data["rows"] == ["encoding"] and {c["row"]: c["chosen"] for c in data["cells"]} == {
        "rope": None,
        "alibi": None,
    }
    assert {c["row"]: c["seeds"] for c in data["cells"]} == {"rope": [1, 2], "alibi": [1, 2]}
    counts = {name: len(trials(tmp_path, name)) for name in ("s-rope", "s-alibi", "s-reseed")}
    records = len(list(tmp_path.rglob("record.json")))
    run_sweep(path, tmp_path, "--reseed=2", "--per=model.arch.encoding")
    assert {name: len(trials(tmp_path, name)) for name in counts} == counts
    assert len(list(tmp_path.rglob("record.json"))) == records  # no trial program was started


def test_reseed_survives_kill_9_in_the_reseed_stage(tmp_path):
    path = reseed_sweep(tmp_path)
    env = {**os.environ, "WANDB_MODE": "disabled", "FAKE_TRIAL_SECONDS": "3"}
    cmd = sweep_cmd(path, tmp_path, "--reseed=2", "--per=model.arch.encoding")
    sweep = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = lambda: list((tmp_path / "sweeps" / "s-reseed").glob("trial-*/runs/*/record.json"))  # noqa: E731
    kill_once_started(sweep, started, 180, "the reseed stage never started a trial")
    run_sweep(path, tmp_path, "--reseed=2", "--per=model.arch.encoding")
    points = reseed_points(tmp_path)
    assert len(points) == 4 == len(set(points))
    assert [len(trials(tmp_path, f"s-{g}")) for g in ("rope", "alibi")] == [2, 2]  # stage 1 not redone


@pytest.mark.parametrize(
    "args, message",
    [
        (["--reseed=3"], "error: --reseed needs --per KEY[,KEY] (the parameters tuned separately, "
                         "e.g. model.arch.encoding)"),
        (["--reseed=3", "--per=model.arch.dim"],
         "error: --per 'model.arch.dim' is not a parameter with `values` in {path}; "
         "choose from: data.task, model.arch.encoding, model.lr"),
        (["--per=model.arch.encoding"],
         "error: --per needs --reseed N with N >= 1 fresh seeds per configuration, got 0"),
    ],
)  # fmt: skip
def test_reseed_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message, capsys, monkeypatch):
    path = reseed_sweep(tmp_path)
    code, _, err = cli_in_process(["sweep", str(path), f"--out_dir={tmp_path / 'out'}", *args], capsys, monkeypatch,
                                  ROOT)  # fmt: skip
    assert code == 2 and err.strip() == message.format(path=path)
    assert not (tmp_path / "out").exists()


def test_seed_ensembles_in_a_sweep_resume_each_member_exactly_once(tmp_path):
    """`--ensemble_seeds 3`: a grid point's three seeds run as one child (one pid names their run folders), each
    its own trial. The sweep is killed while that child is frozen right after its first validation (step 2 of 4):
    the re-run fails the three dead trials, re-queues each and resumes each member alone from its own checkpoint
    (an ensemble of one), so every seed finishes once and each validation is done once. (That a resumed member's
    values equal an uninterrupted one's: tests/runs/test_ensemble_fit.py.)"""
    grid = {"model.arch.encoding": {"values": ["rope"]}, "seed_everything": {"values": [0, 1, 2]}}
    path = tiny_sweep(tmp_path, grid)
    env = {**os.environ, "WANDB_MODE": "disabled", FAULT_ENV: "ensemble:validated@stop"}
    sweep = subprocess.Popen(sweep_cmd(path, tmp_path, "--ensemble_seeds=3"), cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    checkpoints, deadline = [], time.time() + 180
    while len(checkpoints) < 3 or not stopped(trial_pid(checkpoints[0].parents[1])):
        assert time.time() < deadline and sweep.poll() is None, "the ensemble never reached its first validation"
        checkpoints = sorted((tmp_path / "sweeps" / "s").glob("trial-*/runs/*/checkpoints/last.ckpt"))
        time.sleep(0.05)
    assert len({trial_pid(c.parents[1]) for c in checkpoints}) == 1  # one child trains the three
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    os.kill(trial_pid(checkpoints[0].parents[1]), signal.SIGKILL)
    (running,) = {tuple(t.user_attrs["ensemble"]) for t in trials(tmp_path) if t.state == TrialState.RUNNING}
    assert running == (0, 1, 2)
    run_sweep(path, tmp_path, "--ensemble_seeds=3", "--workers=3")
    ts = trials(tmp_path)
    dead = [t for t in ts if t.state == TrialState.FAIL]
    assert [t.number for t in dead] == [0, 1, 2] and all("died" in t.user_attrs["reason"] for t in dead)
    retries = [t for t in ts if t.state == TrialState.COMPLETE]
    assert sorted(t.params["seed_everything"] for t in retries) == [0, 1, 2]
    for retry in retries:
        assert "ensemble" not in retry.user_attrs  # a retry runs alone, from its own checkpoint
        (record,) = Path(retry.user_attrs["trial_dir"]).glob("runs/*/record.json")
        assert retry.user_attrs["resumed_from"] == str(record.parent / "checkpoints" / "last.ckpt")
        resumed = json.loads(record.read_text())
        assert resumed["status"] == "finished" and [row["step"] for row in resumed["history"]] == [2, 4]
        assert [r["step"] for r in resumed["resumes"]] == [2] and resumed["seed"] == retry.params["seed_everything"]


@pytest.mark.parametrize(
    "change, why",
    [
        ({"method": "random"}, "not grid"),
        ({"parameters": {"seed_everything": {"values": [0]}}}, "no `seed_everything"),
        ({"program": "train.py"}, "not cli.py"),
    ],
)
def test_a_sweep_that_cannot_group_seeds_refuses_ensemble_seeds_in_one_line(change, why):
    from pe_core.errors import ConfigError
    from pe_sweeps.sweep.options import SweepOptions
    from pe_sweeps.sweep.run import check_ensembles

    sweep = {"method": "grid", "parameters": {"seed_everything": {"values": [0, 1]}}, "program": "cli.py", **change}
    check_ensembles(SweepOptions(file="s.yaml", ensemble_seeds=1), sweep)  # without ensembles: anything goes
    with pytest.raises(ConfigError, match=why) as error:
        check_ensembles(SweepOptions(file="s.yaml", ensemble_seeds=3), sweep)
    assert "\n" not in str(error.value) and "--ensemble_seeds" in str(error.value)
