"""Optuna's journal storages for sweeps that have no database server: a journal file on a shared filesystem
(`JournalFileBackend`, the storage Optuna's FAQ recommends on NFS) or a Redis server (`JournalRedisBackend`).

Optuna's journal storages have no heartbeats, so this module adds them, each judged on one clock:
- a journal file `j.log` keeps one heartbeat file per trial in `j.log.heartbeats/`; a beat rewrites the file,
  so its mtime is stamped by the machine that holds the files (the file server on NFS), and a trial is stale
  when its file is older than a probe file written now in the same folder (the same clock again);
- Redis keeps a key per trial that expires after the grace period, by the Redis server's clock; a trial is
  stale when it has beaten once (a member of the study's set) and its key has expired.

Locks (storages/study_lock.py): an flock on `j.log.study-lock` (Optuna's own append lock is `j.log.lock`),
released by the kernel, or by the NFS server's lease, when its holder dies; for Redis, `RedisLock`: a key with
an expiry that a thread renews while held.
"""

import os
import threading
import time
import uuid
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalRedisBackend
from optuna.trial import TrialState

from pe_sweeps import internals

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def is_redis(url: str) -> bool:
    return url.startswith(REDIS_SCHEMES)


def is_journal_file(url: str) -> bool:
    """A `--storage` given as a file path (no `scheme://`) is a journal file."""
    return "://" not in url


class FileHeartbeats:
    """Heartbeat files beside a journal file, stamped and judged by the file system's clock."""

    def __init__(self, journal: Path, grace: int):
        self.folder, self.grace = Path(f"{journal}.heartbeats"), grace
        self.folder.mkdir(exist_ok=True)

    def record(self, trial_id: int) -> None:
        path = self.folder / str(trial_id)
        path.write_bytes(b"")  # truncating a file stamps its mtime with the file system's clock
        os.utime(path)  # NFS: times=None asks the server for its own time

    def now(self) -> float:
        probe = self.folder / f".now-{uuid.uuid4().hex}"
        try:
            probe.write_bytes(b"")
            return probe.stat().st_mtime
        finally:
            probe.unlink(missing_ok=True)

    def stale(self, trial_ids: list[int]) -> list[int]:
        now, stale = self.now(), []
        for trial_id in trial_ids:
            try:
                if now - (self.folder / str(trial_id)).stat().st_mtime > self.grace:
                    stale.append(trial_id)
            except FileNotFoundError:  # never beaten: recover_dead_trials handles it by the sweep's name
                pass
        return stale


class RedisHeartbeats:
    """Heartbeat keys on the Redis server, expired by its clock."""

    def __init__(self, client, prefix: str, grace: int):
        self.client, self.prefix, self.grace = client, prefix, grace

    def record(self, trial_id: int) -> None:
        with self.client.pipeline() as pipe:
            pipe.set(f"{self.prefix}pe-heartbeat:{trial_id}", 1, px=int(self.grace * 1000))
            pipe.sadd(f"{self.prefix}pe-heartbeats", trial_id)
            pipe.execute()

    def stale(self, trial_ids: list[int]) -> list[int]:
        with self.client.pipeline(transaction=False) as pipe:
            for trial_id in trial_ids:
                pipe.sismember(f"{self.prefix}pe-heartbeats", trial_id)
                pipe.exists(f"{self.prefix}pe-heartbeat:{trial_id}")
            answers = pipe.execute()
        beaten, alive = answers[0::2], answers[1::2]
        return [t for t, b, a in zip(trial_ids, beaten, alive) if b and not a]


class HeartbeatJournalStorage(optuna.storages.JournalStorage):
    """Optuna's `JournalStorage` with heartbeats (`record_heartbeat`, `stale_trial_ids`): the sweep's
    dead-trial recovery works as on an RDB storage. Not an Optuna `BaseHeartbeat`: the sweep, not Optuna's
    `optimize`, beats and recovers."""

    def __init__(self, backend, heartbeats, url: str):
        super().__init__(backend)
        self.heartbeats, self.url = heartbeats, url

    def record_heartbeat(self, trial_id: int) -> None:
        self.heartbeats.record(trial_id)

    def stale_trial_ids(self, study_id: int) -> list[int]:
        running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        return self.heartbeats.stale([internals.trial_id(t) for t in running])


def journal_file(url: str) -> Path:
    """The journal file a `--storage` path names; its folder must exist (a typo is not created silently)."""
    path = Path(url).expanduser().resolve()
    if not path.parent.is_dir():
        raise ValueError(f"no folder {path.parent} for the journal file")
    return path


def redis_client(url: str):
    import redis

    return redis.Redis.from_url(url)


def open_journal(url: str, grace: int) -> HeartbeatJournalStorage:
    """The journal storage for a file path or a redis:// URL."""
    if is_redis(url):
        client = redis_client(url)
        client.ping()  # fail now, in one line, rather than at the first write
        return HeartbeatJournalStorage(JournalRedisBackend(url), RedisHeartbeats(client, "", grace), url)
    path = journal_file(url)
    return HeartbeatJournalStorage(JournalFileBackend(str(path)), FileHeartbeats(path, grace), url)


class RedisLock:
    """A lock held across processes and hosts on the Redis server: a key that expires `ttl` s after its
    holder stops renewing it (a thread renews it every ttl / 3 s while held), so a killed holder frees it."""

    def __init__(self, url: str, name: str, ttl: float = 15.0):
        self.client, self.key, self.ttl = redis_client(url), f"pe-study-lock:{name}", ttl
        self.token: str | None = None
        self.renewing = threading.Event()

    def acquire(self) -> None:
        token = uuid.uuid4().hex
        while not self.client.set(self.key, token, nx=True, px=int(self.ttl * 1000)):
            time.sleep(0.05)
        self.token = token
        self.renewing = threading.Event()
        threading.Thread(target=self.renew, args=(token, self.renewing), daemon=True, name="redis-lock").start()

    def renew(self, token: str, stop: threading.Event) -> None:
        while not stop.wait(self.ttl / 3):
            self.client.eval(RENEW, 1, self.key, token, int(self.ttl * 1000))

    def release(self) -> None:
        self.renewing.set()
        token, self.token = self.token, None
        self.client.eval(RELEASE, 1, self.key, token)


# compare-and-set scripts: only the holder's token renews or deletes the key
RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
