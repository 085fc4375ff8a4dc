"""Re-queueing a failed grid point is idempotent (a trial with a retry is never queued twice), a point
failed for good is left alone, and a sweep killed between queueing a retry and telling the failure loses
nothing. The study lock is checked on both storages (PostgreSQL: PE_TEST_POSTGRES)."""

import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml
from helpers import fresh_postgres_database
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState
from sweep_helpers import fake_sweep

from pe_core.errors import ConfigError
from pe_sweeps.storages.storage import check_clock
from pe_sweeps.storages.study_lock import AdvisoryLock, StudyLock
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.recovery import HOST_ID, OWNER, owner_of, recover_dead_trials, requeue
from pe_sweeps.sweep.run import SweepOptions
from pe_sweeps.sweep.study_protocol import QUEUED
from pe_sweeps.sweep.supervision import FailureStreak, Heartbeats, Sweep

FAKE = Path(__file__).resolve().parents[1] / "fake_fit.py"
ROOT = Path(__file__).resolve().parents[2]


def grid_study(state: TrialState, reason: str) -> optuna.Study:
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.add_trial(optuna.create_trial(
        state=state, params={"x": 1}, distributions={"x": CategoricalDistribution([1, 2])},
        system_attrs={QUEUED: True, "grid_id": 0}, user_attrs={"reason": reason}, value=None,
    ))  # fmt: skip
    return study


def waiting(study: optuna.Study) -> list:
    return [t for t in study.get_trials() if t.state == TrialState.WAITING]


def test_requeue_twice_queues_one_retry():
    study = grid_study(TrialState.FAIL, "killed")
    (failed,) = study.get_trials()
    assert requeue(study, failed, "killed", max_retries=2, crashed=True)
    assert requeue(study, failed, "killed", max_retries=2, crashed=True)  # e.g. a retried storage call
    (retry,) = waiting(study)
    assert retry.params == {"x": 1} and retry.system_attrs["retry_history"] == [0]


def test_a_point_failed_for_good_is_left_alone():
    study = grid_study(TrialState.FAIL, "error: dim must be divisible by num_heads")
    recover_dead_trials(study, max_retries=2, heartbeat=30)
    assert waiting(study) == []


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request, tmp_path):
    """The two storages a sweep shares across processes: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'optuna.db'}"
    else:
        yield from fresh_postgres_database("pe_requeue")


class Killed(BaseException):
    """Stands for a SIGKILL: nothing after it runs, no handler catches it."""


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_sweep_killed_between_requeue_and_tell_loses_no_point(tmp_path, storage, monkeypatch):
    """finish() queues the retry and tells the failure in one locked step; killed between the two, the
    trial stays RUNNING, the next process's recovery fails it and finds the retry already queued."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "program": str(FAKE), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"x": {"values": [1]}}, "command": ["${env}", "${interpreter}", "${program}", "${args}"],
    }))  # fmt: skip
    opts = SweepOptions(file=str(path), out_dir=str(tmp_path), storage=storage, study_name="k")
    runner = Sweep(sf.load_sweep(path), opts)
    study = runner.study
    trial = runner.next_trial(study)

    def killed_at_tell(*args, **kwargs):
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(optuna.Study, "tell", killed_at_tell)
        with pytest.raises(Killed):
            runner.finish(study, trial, TrialState.FAIL, reason="killed by SIGKILL", requeue_as=("SIGKILL", True))
    runner.lock.close()
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING, TrialState.WAITING]
    gone = {**owner_of(trial.user_attrs), "pid": dead_pid(), "token": "the killed process"}  # its sweep process
    study._storage.set_trial_user_attr(trial._trial_id, OWNER, gone)

    later = Sweep(sf.load_sweep(path), opts)  # the next process on the same study
    retry = later.next_trial(later.study)
    assert retry.number == 1 and later.next_trial(later.study) is None
    assert [t.state for t in later.study.get_trials()] == [TrialState.FAIL, TrialState.RUNNING]
    later.lock.close()


def test_study_lock_excludes_another_process_and_dies_with_its_holder(storage):
    """Two StudyLocks stand for two processes (each its own file handle / connection): the second waits
    while the first holds the lock, and gets it once the first is released or its connection dropped."""
    first, second = StudyLock(storage, "s"), StudyLock(storage, "s")
    got = threading.Event()

    def take_second():
        with second:
            got.set()

    first.__enter__()
    waiter = threading.Thread(target=take_second)
    waiter.start()
    assert not got.wait(1.0)  # held by the first
    if isinstance(first.process, AdvisoryLock):
        first.process.close()  # the holder's connection ends, as when its process is killed
    else:
        first.__exit__(None, None, None)
    assert got.wait(10.0)
    waiter.join()
    second.close()


def test_a_failure_that_promised_a_retry_it_lacks_is_re_queued_once():
    """A study written before recovery queued the retry first (or killed between the two writes) holds a
    FAIL whose reason says re-queued and no retry: recovery queues it, once; 'not re-queued' stays failed."""
    study = grid_study(TrialState.FAIL, "sweep process died; re-queued")
    recover_dead_trials(study, max_retries=2, heartbeat=30)
    recover_dead_trials(study, max_retries=2, heartbeat=30)
    (retry,) = waiting(study)
    assert retry.system_attrs["retry_history"] == [0] and "(retry restored)" in retry.user_attrs["reason"]
    study = grid_study(TrialState.FAIL, "exit code 1: boom; not re-queued: --max_retries 2 reached")
    recover_dead_trials(study, max_retries=2, heartbeat=30)
    assert waiting(study) == []


def test_a_dead_trial_gets_its_reason_and_one_retry(monkeypatch):
    study = grid_study(TrialState.RUNNING, "")
    (trial,) = study.get_trials()
    for key, value in {"pid": dead_pid(), "token": "gone", "host_id": HOST_ID, "host": "h"}.items():
        study._storage.set_trial_user_attr(trial._trial_id, key, value)
    recover_dead_trials(study, max_retries=2, heartbeat=30)
    dead, retry = study.get_trials()
    assert dead.state == TrialState.FAIL and dead.user_attrs["reason"].startswith("sweep process died (host h, pid")
    assert dead.user_attrs["reason"].endswith("; re-queued") and retry.state == TrialState.WAITING


def test_heartbeats_cover_every_held_trial_until_released():
    """Beats come from one thread for every trial the process holds (asked, not yet told), whatever its
    worker is waiting for: the study lock, the fork server, the storage."""
    beats = []

    class Storage:
        def record_heartbeat(self, trial_id):
            beats.append(trial_id)

    heartbeats = Heartbeats(Storage(), 0.05, lambda action, *args: action(*args))
    heartbeats.hold(1)
    heartbeats.hold(2)
    heartbeats.start()
    time.sleep(0.3)
    heartbeats.release(1)
    before = len(beats)
    time.sleep(0.3)
    heartbeats.close()
    assert beats[:before].count(1) >= 2 and beats[:before].count(2) >= 2
    assert 1 not in beats[before + 1 :] and beats[before:].count(2) >= 2


def test_failure_streak_stops_on_the_same_reason_only():
    streak = FailureStreak(3)
    for reason in ("exit code 2: bad --x=1", "exit code 2: bad --x=2", "exit code 1: other", "exit code 2: bad --x=3"):
        streak.add(TrialState.FAIL, reason)
    assert streak.stopped() is None
    streak.add(TrialState.FAIL, "exit code 2: bad --x=4")
    streak.add(TrialState.FAIL, "exit code 2: bad --x=5")
    assert "3 trials in a row failed with the same reason" in streak.stopped()
    streak.add(TrialState.COMPLETE, None)
    assert streak.stopped() is None and FailureStreak(0).stopped() is None


BAD_PRESET = "exit code 2: error: --data.preset: expected 'mr', 'cr', got 'subjj' (options: cli.py fit --help)"


@pytest.mark.parametrize(
    "parameters, reason, at_once",
    [
        ({"data.preset": {"value": "subjj"}, "seed_everything": {"values": [1, 2]}}, BAD_PRESET, True),
        ({"data.preset": {"values": ["mr", "subjj"]}}, BAD_PRESET, False),  # the next trial may get mr
        ({"data.preset": {"values": ["subjj"]}}, BAD_PRESET, True),  # a one-value list is a constant
        ({"data": {"values": [{"preset": "mr"}, {"preset": "subjj"}]}}, BAD_PRESET, False),  # varied around it
        ({"data.preset": {"value": "mr"}, "data.vocab": {"values": [1, 2]}},
         "exit code 2: error: --data: Option 'presett' is not accepted (options: cli.py fit --help)", True),
        ({"data.presett": {"values": [1, 2]}},
         "exit code 2: error: --data: Option 'presett' is not accepted (options: cli.py fit --help)", False),
        ({"x": {"values": [1, 2]}}, "exit code 2: error: unrecognized arguments: --model.arch.bogus=1", True),
        ({"model.arch.dim": {"values": [30, 32]}}, "exit code 2: error: dim=30 is not divisible by num_heads=4",
         False),  # not a parse error: a check across options, one of which varies
        ({"data.preset": {"value": "subjj"}}, "exit code 1: error: --data.preset: expected 'mr'", False),
    ],
)  # fmt: skip
def test_a_rejected_option_no_trial_varies_stops_the_sweep_at_once(parameters, reason, at_once):
    """`--set data.preset=subjj` failed 10 trials alike before the streak stopped the sweep; an option the fit
    parser rejects and every trial is given alike stops it at the first (the rest would fail the same way)."""
    streak = FailureStreak(10, {"method": "grid", "parameters": parameters})
    streak.add(TrialState.FAIL, reason)
    assert (streak.stopped() or "").startswith("stopped at the first failed trial") is at_once
    never = FailureStreak(0, {"method": "grid", "parameters": parameters})
    never.add(TrialState.FAIL, reason)
    assert never.stopped() is None  # --max_failures_in_a_row 0: never stop
    searched = {"method": "custom", "scheduler": {"search_space": "f.py:space"}, "parameters": parameters}
    unknown = FailureStreak(10, searched)  # a search_space function defines the space: the file cannot say
    unknown.add(TrialState.FAIL, reason)
    assert unknown.stopped() is None


def test_a_host_whose_clock_is_off_the_studys_is_refused(tmp_path, monkeypatch):
    """SQLite stamps heartbeats with each writer's clock: a 2-minute skew made points run three times."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    check_clock(url, 10)  # a local disk: no skew
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 120)
    with pytest.raises(ConfigError, match=r"this host's clock is \+12\d\.\d s off the clock of .*more than 12 s"):
        check_clock(url, 10)


def test_a_sweep_whose_trials_all_fail_stops_and_exits_1(tmp_path):
    """A missing program: every trial fails the same way. The sweep (random, no run_cap) stops after
    --max_failures_in_a_row of them with one line, and exits 1 because no trial succeeded."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "program": str(tmp_path / "missing.py"), "method": "random", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"x": {"distribution": "uniform", "min": 0, "max": 1}},
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
    }))  # fmt: skip
    cli = [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={tmp_path}", "--cold_start"]
    done = subprocess.run([*cli, "--max_failures_in_a_row=3"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "WANDB_MODE": "disabled"})  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, done.stderr[-2000:]
    assert "stopped after 3 trials in a row failed with the same reason" in errors[0]
    assert "no trial succeeded (3 failed; the first: exit code 2:" in errors[1] and "missing.py" in errors[1]


def test_a_full_disk_is_named_not_optunas_max_length_guess():
    """Optuna wraps a failed commit in "... e.g. exceeding max length"; the sweep's line names the cause."""
    from pe_sweeps.storages.storage import error_line

    try:
        try:
            raise sqlalchemy.exc.OperationalError("INSERT ...", {}, Exception("database or disk is full"))
        except sqlalchemy.exc.OperationalError as cause:
            raise optuna.exceptions.StorageInternalError("An exception is raised ... exceeding max length.") from cause
    except optuna.exceptions.StorageInternalError as error:
        line = error_line(error)
    assert line.startswith("disk full: ") and "max length" not in line
    assert error_line(OSError(28, "No space left on device")).startswith("disk full")
    assert error_line(RuntimeError("boom")) == "RuntimeError: boom"


def grid_file(tmp_path: Path, points: int) -> Path:
    """A grid of `points` fake trials (tests/fake_fit.py, val/acc = x)."""
    return fake_sweep(tmp_path, points, "g")


@pytest.mark.slow
def test_a_point_given_up_exits_1_naming_it_and_the_command_that_retries_it(tmp_path, max_retries=1):
    """Issue 42.4: a grid point whose child crashes every time is failed for good after --max_retries; the
    sweep printed its table and exited 0 as if the grid were done. Now it exits 1 with one line naming the
    point and the command that retries it; that command (the crash fixed) finishes the point, exit 0."""
    args = ["sweep", str(grid_file(tmp_path, 2)), f"--out_dir={tmp_path}", "--cold_start", "--heartbeat=1",
            f"--max_retries={max_retries}"]  # fmt: skip
    environ = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "FAKE_SLEEP": "0.05"}
    crashing = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env={**environ, "FAKE_CRASH_X": "2"})  # fmt: skip
    errors = [line for line in crashing.stderr.splitlines() if line.startswith("error:")]
    assert crashing.returncode == 1 and "Traceback" not in crashing.stderr, crashing.stderr[-3000:]
    retry = shlex.join(["python", "cli.py", *args, "--retry_failed"])
    assert errors == [
        f"error: sweep g: 1 grid point(s) failed for good (x=2), the last failure: exit code 1: RuntimeError: "
        f"boom; not re-queued: --max_retries {max_retries} reached; retry them with: {retry}"
    ], crashing.stderr[-3000:]
    study = optuna.load_study(study_name="g", storage=f"sqlite:///{tmp_path / 'sweeps' / 'g' / 'optuna.db'}")
    assert [t.params["x"] for t in study.trials if t.state == TrialState.FAIL] == [2] * (max_retries + 1)
    fixed = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args, "--retry_failed"], capture_output=True,
                           text=True, timeout=300, cwd=ROOT, env=environ)  # fmt: skip
    assert fixed.returncode == 0 and "error:" not in fixed.stderr, fixed.stderr[-3000:]
    complete = [t.params["x"] for t in study.get_trials(states=(TrialState.COMPLETE,))]
    assert sorted(complete) == [1, 2]
