"""A process is named by its pid and its start time (sweep/children.py `process_started`), never its pid alone:
the pid counter wraps (issue 42 point 9: it did, at 32768, during one run), and a later process given a recorded
pid is not the one recorded. Each place that decides from a recorded pid whether its process still runs (a
trial's sweep process in recovery, a warm trial whose fork server died, stopping a warm trial) treats a live pid
with another start time as gone; a record written before start times were kept is judged by its pid alone."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from pe_sweeps.sweep.children import pid_alive, process_started, stop_child
from pe_sweeps.sweep.recovery import HOST_ID, OWNER, recover_dead_trials
from pe_sweeps.sweep.study_protocol import QUEUED
from pe_sweeps.sweep.warm_start import WarmChild

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def other_process():
    """A live process in a session of its own (a trial's process group), stopped after the test."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def test_pid_alive_needs_the_same_start_time():
    me, started = os.getpid(), process_started(os.getpid())
    assert started is not None
    assert pid_alive(me, started) and pid_alive(me)  # no start time recorded: the pid alone
    assert not pid_alive(me, started + 1)


def running_trial(attrs: dict) -> optuna.Study:
    """A study with one RUNNING grid trial whose sweep process `attrs` name (on this host)."""
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.add_trial(optuna.create_trial(
        state=TrialState.RUNNING, params={"x": 1}, distributions={"x": CategoricalDistribution([1, 2])},
        system_attrs={QUEUED: True, "grid_id": 0}, user_attrs={"token": "another sweep", "host_id": HOST_ID,
                                                                "host": "h", **attrs},
    ))  # fmt: skip
    return study


@pytest.mark.parametrize(
    "recorded, dead",
    [("other", True), ("same", False), (None, False)],  # None: a trial written before start times were kept
)
def test_recovery_takes_a_reused_pid_for_a_dead_sweep(other_process, recorded, dead):
    started = process_started(other_process.pid)
    attrs = {"pid": other_process.pid}
    if recorded is not None:
        attrs["pid_started"] = started + 1 if recorded == "other" else started
    study = running_trial(attrs)
    recover_dead_trials(study, max_retries=2, heartbeat=30)
    trial = study.get_trials()[0]
    assert (trial.state == TrialState.FAIL) is dead, trial.user_attrs.get("reason")
    if dead:
        assert trial.user_attrs["reason"].startswith(f"sweep process died (host h, pid {other_process.pid})")


@pytest.mark.parametrize("same_process", [False, True])
def test_a_warm_child_whose_server_died_kills_only_its_own_process_group(other_process, same_process):
    """The fork server's connection closes: the sweep SIGKILLs the trial's group only if its pid still names
    the trial (the server reported its start time); a process that got the pid since is left alone."""
    started = process_started(other_process.pid)
    ours, server = socket.socketpair()
    child = WarmChild(ours, other_process.pid, ["fit"], started if same_process else started + 1)
    server.close()
    assert child.poll() == -signal.SIGKILL
    time.sleep(0.1)
    assert (other_process.poll() is not None) is same_process


def test_stopping_a_warm_child_leaves_a_reused_pid_alone(other_process):
    ours, server = socket.socketpair()
    child = WarmChild(ours, other_process.pid, ["fit"], process_started(other_process.pid) + 1)
    server.sendall(json.dumps({"status": 0}).encode() + b"\n")  # the trial exited; its server reaped it
    stop_child(child, grace=0.5)
    assert child.returncode == 0 and other_process.poll() is None
    server.close()


@pytest.mark.slow
def test_a_sweep_records_its_start_time_beside_its_pid(tmp_path):
    """Every trial a sweep runs names its sweep process by pid and start time (user attr `_pe`: pid, pid_started), for
    `recover_dead_trials` to judge."""
    sweep = {
        "program": str(ROOT / "tests" / "fake_fit.py"), "method": "grid", "parameters": {"x": {"values": [1]}},
        "metric": {"name": "val/acc", "goal": "maximize"},
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
    }  # fmt: skip
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(sweep))
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "FAKE_SLEEP": "0.1"}
    command = [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={tmp_path}"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = None
    while process.poll() is None and started is None:  # read while the sweep process lives
        started = process_started(process.pid)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-2000:]
    study = optuna.load_study(study_name="f", storage=f"sqlite:///{tmp_path / 'sweeps' / 'f' / 'optuna.db'}")
    (trial,) = study.get_trials()
    assert trial.user_attrs[OWNER]["pid"] == process.pid and trial.user_attrs[OWNER]["pid_started"] == started
