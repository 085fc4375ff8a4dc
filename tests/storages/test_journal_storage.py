"""Optuna's journal storages as sweep storages (storages/journal_storage.py): a journal file and Redis open from
`--storage`, beat and go stale on one clock, lock across processes, and fail in one line. The exactly-once fault
tests run on both in tests/sweep/test_faults.py."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from helpers import fresh_redis_database
from optuna.trial import TrialState

from pe_core.errors import ConfigError
from pe_sweeps.storages import journal_storage as journal
from pe_sweeps.storages import storage
from pe_sweeps.storages.study_lock import StudyLock

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["journal", "redis"])
def url(request, tmp_path):
    if request.param == "journal":
        yield str(tmp_path / "study.log")
    else:
        yield from fresh_redis_database()


@pytest.fixture
def redis_url():
    yield from fresh_redis_database()


def running_trial(study: optuna.Study) -> int:
    trial = study.ask()
    return trial._trial_id


def test_journal_storages_open_from_a_path_or_a_redis_url(url):
    opened = storage.open_storage(url, heartbeat=1)
    assert isinstance(opened, journal.HeartbeatJournalStorage)
    study = optuna.create_study(study_name="s", storage=opened)
    study.enqueue_trial({"x": 1})
    trial = study.ask()
    trial.suggest_int("x", 0, 5)
    study.tell(trial, 1.0)
    again = optuna.load_study(study_name="s", storage=storage.open_storage(url, heartbeat=1))  # another process
    assert [t.params for t in again.get_trials(states=(TrialState.COMPLETE,))] == [{"x": 1}]


def test_a_trial_without_recent_heartbeats_is_stale_and_one_beating_is_not(tmp_path):
    opened = storage.open_storage(str(tmp_path / "study.log"), heartbeat=1)
    study = optuna.create_study(study_name="s", storage=opened)
    beating, silent, never = running_trial(study), running_trial(study), running_trial(study)
    for trial_id in (beating, silent):
        storage.record_heartbeat(opened, trial_id)
    old = time.time() - storage.grace_period(1) - 5
    os.utime(opened.heartbeats.folder / str(silent), (old, old))  # its last beat was written long ago
    assert storage.stale_trial_ids(opened, study._study_id) == [silent]  # `never` is left to the sweep's name check
    assert never not in storage.stale_trial_ids(opened, study._study_id)


def test_redis_heartbeats_expire_by_the_servers_clock(redis_url):
    opened = storage.open_storage(redis_url, heartbeat=1)
    opened.heartbeats.grace = 0.3  # seconds, as the server counts them
    study = optuna.create_study(study_name="s", storage=opened)
    beating, silent = running_trial(study), running_trial(study)
    storage.record_heartbeat(opened, silent)
    deadline = time.time() + 5
    while time.time() < deadline and not storage.stale_trial_ids(opened, study._study_id):
        storage.record_heartbeat(opened, beating)
        time.sleep(0.1)
    assert storage.stale_trial_ids(opened, study._study_id) == [silent]
    study.tell(silent, state=TrialState.FAIL)
    assert storage.stale_trial_ids(opened, study._study_id) == []  # finished trials are never stale


HOLDER = """
import sys, time
from pe_sweeps.storages.study_lock import StudyLock
lock = StudyLock(sys.argv[1], "s")
lock.__enter__()
print("held", flush=True)
time.sleep(600)
"""


def test_the_study_lock_excludes_other_processes_and_a_killed_holder_frees_it(url):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = StudyLock(url, "s")
        if journal.is_redis(url):
            lock.process.ttl = 15.0
        waited = []

        def take():
            start = time.monotonic()
            with lock:
                waited.append(time.monotonic() - start)

        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive(), "the lock was taken while another process held it"
        holder.kill()
        holder.wait()
        thread.join(30)  # flock: at once; Redis: once the key expires (ttl 15 s, no longer renewed)
        assert not thread.is_alive() and waited
    finally:
        holder.kill()


def test_a_redis_lock_is_renewed_while_held(redis_url):
    url = redis_url
    lock = journal.RedisLock(url, "renewed", ttl=0.6)
    lock.acquire()
    time.sleep(1.5)  # > 2 ttl: only renewal keeps it
    other = journal.RedisLock(url, "renewed", ttl=0.6)
    assert not other.client.set(other.key, "x", nx=True, px=600)
    lock.release()
    assert other.client.set(other.key, "x", nx=True, px=600)


@pytest.mark.parametrize(
    "given, expected",
    [
        ("/no/such/folder/j.log", "cannot open sweep storage /no/such/folder/j.log: no folder /no/such/folder"),
        ("redis://127.0.0.1:1/0", "cannot open sweep storage redis://127.0.0.1:1/0: Error 111"),
        ("redis://:s3cret@127.0.0.1:1/0", "cannot open sweep storage redis://:***@127.0.0.1:1/0: Error 111"),
    ],
)
def test_a_journal_that_cannot_be_opened_is_one_line_without_its_password(given, expected):
    with pytest.raises(ConfigError) as error:
        storage.open_storage(given, heartbeat=1)
    message = str(error.value)
    assert message.startswith(expected) and "\n" not in message and "s3cret" not in message
    assert message.count("cannot open sweep storage") == 1


def test_an_sqlite_study_on_a_network_filesystem_warns_once(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    assert storage.network_filesystem_warning(url) is None  # tmp_path is local
    monkeypatch.setattr(storage, "filesystem_type", lambda path: "nfs4")
    warning = storage.network_filesystem_warning(url)
    assert warning.startswith("warning: the SQLite study") and "(nfs4)" in warning and "\n" not in warning
    assert f"--storage {tmp_path / 'optuna.log'}" in warning
    assert storage.network_filesystem_warning(str(tmp_path / "j.log")) is None  # a journal is the remedy


def test_filesystem_type_reads_the_longest_mount_point(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/sda1 / ext4 rw 0 0\nserver:/home /home nfs4 rw 0 0\nserver:/x /home/a\\040b nfs rw 0 0\n")
    assert storage.filesystem_type(Path("/home/u"), mounts) == "nfs4"
    assert storage.filesystem_type(Path("/home/a b/c"), mounts) == "nfs"
    assert storage.filesystem_type(Path("/homex"), mounts) == "ext4"


def test_a_journal_in_a_missing_folder_is_refused_and_the_folder_not_made(tmp_path):
    missing = tmp_path / "typo" / "j.log"
    with pytest.raises(ValueError, match="no folder"):
        StudyLock(str(missing), "s")  # the lock is taken before the storage opens: it must not make the folder
    assert not missing.parent.exists()
