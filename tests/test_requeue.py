"""Re-queueing a failed grid point is idempotent (a trial with a retry is never queued twice), a point
failed for good is left alone, and a sweep killed between queueing a retry and telling the failure loses
nothing. The study lock is checked on both storages (PostgreSQL: PE_TEST_POSTGRES)."""

import subprocess
import threading
from pathlib import Path

import optuna
import pytest
import yaml
from helpers import fresh_postgres_database
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tracking import sweep_file as sf
from tracking.study_lock import AdvisoryLock, StudyLock
from tracking.sweep import QUEUED, Sweep, SweepOptions, recover_dead_trials, requeue

FAKE = Path(__file__).resolve().parent / "fake_fit.py"


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
    for key, value in {"pid": dead_pid(), "token": "the killed process"}.items():  # its sweep process is gone
        study._storage.set_trial_user_attr(trial._trial_id, key, value)

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
