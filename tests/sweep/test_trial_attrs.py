"""A trial's Optuna user attributes are the user's (issue 45, point 12): optuna-dashboard lists every one, and a
trial carried 24, among them the sweep's bookkeeping of which process runs it (`token`, `host_id`, `pid`,
`pid_started`). Those live under one attribute, `_pe` (sweep/recovery.py `OWNER`); what a user reads (`host`,
`trial_dir`, `command`, `log`, `record`, `wandb_run_*`, `final/*`, `reason`) stays where it was. A study written
before (the four flat keys) is read the same: its dead trials are recovered and the sweep resumes it."""

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState
from sweep_helpers import fake_sweep

from pe_sweeps.sweep.children import process_started
from pe_sweeps.sweep.recovery import HOST_ID, OWNER, owner_of, recover_dead_trials
from pe_sweeps.sweep.study_protocol import QUEUED

ROOT = Path(__file__).resolve().parents[2]
INTERNAL = {"token", "host_id", "pid", "pid_started"}


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def running_trial(user_attrs: dict) -> optuna.Study:
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.add_trial(optuna.create_trial(
        state=TrialState.RUNNING, params={"x": 1}, distributions={"x": CategoricalDistribution([1, 2])},
        system_attrs={QUEUED: True, "grid_id": 0}, user_attrs={"host": "h", **user_attrs},
    ))  # fmt: skip
    return study


def owner(pid: int, token: str = "another sweep") -> dict:
    return {"token": token, "host_id": HOST_ID, "pid": pid, "pid_started": process_started(pid)}


@pytest.mark.parametrize("layout", ["namespaced", "flat (a study of the older code)"])
def test_a_trial_whose_sweep_died_is_recovered_from_either_layout(layout):
    who = owner(dead_pid())
    study = running_trial({OWNER: who} if layout == "namespaced" else who)
    recover_dead_trials(study, max_retries=2, heartbeat=30)
    dead, retry = study.get_trials()
    assert dead.state == TrialState.FAIL and dead.user_attrs["reason"].startswith("sweep process died (host h, pid")
    assert retry.state == TrialState.WAITING


@pytest.mark.parametrize("layout", ["namespaced", "flat"])
def test_a_trial_whose_sweep_lives_is_left_running(layout):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # another sweep process
    try:
        who = owner(other.pid)
        study = running_trial({OWNER: who} if layout == "namespaced" else who)
        recover_dead_trials(study, max_retries=2, heartbeat=30)
        assert [t.state for t in study.get_trials()] == [TrialState.RUNNING]
    finally:
        other.kill()
        other.wait()


def test_owner_of_reads_both_layouts():
    who = owner(12)
    assert owner_of({OWNER: who, "host": "h"}) == who == owner_of({**who, "host": "h", "log": "x"})
    assert owner_of({"host": "h"}) == {}


@pytest.mark.slow
def test_a_sweep_keeps_its_bookkeeping_in_one_attribute_and_resumes_an_older_study(tmp_path):
    """An older study (flat keys) with a trial RUNNING under a dead sweep process on this host: the new sweep
    fails and retries it, finishes every point once, and writes its own trials' bookkeeping under `_pe`."""
    from pe_sweeps.sweep import sweep_file as sf
    from pe_sweeps.sweep.options import SweepOptions
    from pe_sweeps.sweep.search import build_search
    from pe_sweeps.sweep.study_protocol import apply_overrides, open_study

    path = fake_sweep(tmp_path, 2)
    url = f"sqlite:///{tmp_path / 'sweeps' / 'f' / 'optuna.db'}"
    (tmp_path / "sweeps" / "f").mkdir(parents=True)
    sweep, _ = apply_overrides(sf.load_sweep(path), [])
    study = open_study(sweep, SweepOptions(file=str(path)), url, "f", locked=True)
    trial = study.ask()
    build_search(sweep, "f").draw(trial)
    for key, value in {"host": "h", **owner(dead_pid(), token="old sweep")}.items():  # as the older code wrote
        trial.set_user_attr(key, value)
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "FAKE_SLEEP": "0.1"}
    result = subprocess.run([sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={tmp_path}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    trials = optuna.load_study(study_name="f", storage=url).get_trials()
    old = trials[0]
    assert old.state == TrialState.FAIL and old.user_attrs["reason"].startswith("sweep process died (host h, pid")
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(t.params["x"] for t in done) == [1, 2]
    for t in done:
        assert not INTERNAL & set(t.user_attrs), sorted(t.user_attrs)
        assert set(t.user_attrs[OWNER]) == INTERNAL and t.user_attrs[OWNER]["pid"] != old.user_attrs["pid"]
        assert {"host", "trial_dir", "command", "log", "final/val/acc"} <= set(t.user_attrs)
