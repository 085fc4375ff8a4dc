"""The lock that makes a sweep's read-then-write steps on its Optuna study atomic across processes.

Optuna's RDB storage reads a trial and then writes it in separate statements; two sweep processes that
both see "trial 7 failed, no retry queued yet" would both queue one. Every such step (ask and its queue
pop, tell and re-queue, recovering dead trials, creating the study) holds a `StudyLock`:

- always a thread lock, for the workers of one process;
- on SQLite, an flock on `<database>.lock` beside the database (SQLite ignores `SELECT ... FOR UPDATE`);
- on PostgreSQL, a session-level advisory lock keyed by the study name, on a connection of its own;
- on a journal file, an flock on `<journal>.study-lock`; on a Redis journal, a key renewed while held
  (tracking/journal_storage.py `RedisLock`).

Every cross-process lock is released by the kernel or the server when their holder dies, a SIGKILL
included, so a killed sweep never leaves the study locked.
"""

import hashlib
import threading

import sqlalchemy
from filelock import FileLock

from pe_sweeps.tracking import journal_storage as journal


class AdvisoryLock:
    """A PostgreSQL advisory lock (`pg_advisory_lock`) on its own autocommit connection: the server frees
    it when that connection ends, so a killed holder releases it."""

    def __init__(self, url: str, name: str):
        self.engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool, isolation_level="AUTOCOMMIT")
        self.key = int.from_bytes(hashlib.sha256(f"pe-sweep:{name}".encode()).digest()[:8], "big", signed=True)
        self.connection = None

    def acquire(self) -> None:
        try:
            if self.connection is None:
                self.connection = self.engine.connect()
            self.connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": self.key})
        except sqlalchemy.exc.DBAPIError:
            self.close()  # a dropped connection: the next try opens a new one
            raise

    def release(self) -> None:
        try:
            self.connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
        except sqlalchemy.exc.DBAPIError:
            self.close()  # the connection is gone, and the lock with it

    def close(self) -> None:
        if self.connection is not None:
            try:
                self.connection.close()
            except sqlalchemy.exc.DBAPIError:
                pass
            self.connection = None


def cross_process_lock(url: str, name: str):
    """The storage's own lock for steps across processes: a file lock for SQLite, an advisory lock for
    PostgreSQL, None for an in-memory database or another backend (its row locks are all there is)."""
    if journal.is_redis(url):
        return journal.RedisLock(url, name)
    if journal.is_journal_file(url):
        return FileLock(f"{journal.journal_file(url)}.study-lock")  # Optuna's own lock is <journal>.lock
    backend = sqlalchemy.engine.make_url(url)
    if backend.get_backend_name() == "sqlite":
        return FileLock(f"{backend.database}.lock") if backend.database and backend.database != ":memory:" else None
    if backend.get_backend_name() == "postgresql":
        return AdvisoryLock(url, name)
    return None


class StudyLock:
    """Serialises the read-then-write steps of one study: across this process's threads always, and across
    processes by the storage's own lock (`cross_process_lock`)."""

    def __init__(self, url: str, name: str):
        self.thread = threading.Lock()
        self.process = cross_process_lock(url, name)

    def __enter__(self):
        self.thread.acquire()
        if self.process:
            try:
                self.process.acquire()
            except BaseException:
                self.thread.release()
                raise
        return self

    def __exit__(self, *exc):
        try:
            if self.process:
                self.process.release()
        finally:
            self.thread.release()

    def close(self) -> None:
        if isinstance(self.process, AdvisoryLock):
            self.process.close()
