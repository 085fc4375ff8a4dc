"""The lock that makes a sweep's read-then-write steps on its Optuna study atomic across processes.

Optuna's RDB storage reads a trial and then writes it in separate statements; two sweep processes that
both see "trial 7 failed, no retry queued yet" would both queue one. Every such step (ask and its queue
pop, tell and re-queue, recovering dead trials, creating the study) holds a `StudyLock`:

- always a thread lock, for the workers of one process;
- on SQLite, an flock on `<database>.lock` beside the database (SQLite ignores `SELECT ... FOR UPDATE`);
- on PostgreSQL, a session-level advisory lock keyed by the study name, on a connection of its own;
- on a journal file, an flock on `<journal>.study-lock`; on a Redis journal, a key renewed while held
  (storages/journal_storage.py `RedisLock`).

Every cross-process lock is released by the kernel or the server when their holder dies, a SIGKILL
included, so a killed sweep never leaves the study locked. A lock file is born with the umask's mode (0600 by
default, pe_sweeps/permissions.py), so another user cannot open it to hold it; a sweep that has waited
`NOTICE_AFTER_S` for a file lock says so in one line, naming the holder's pid where /proc/locks shows it.
"""

import hashlib
import os
import sys
import threading
from pathlib import Path

import sqlalchemy
from filelock import FileLock, Timeout

from pe_sweeps import layout
from pe_sweeps.permissions import close_path, file_mode
from pe_sweeps.storages import journal_storage as journal

NOTICE_AFTER_S = 5.0  # a file lock not taken after this long is reported (once per wait), then waited for


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
        return study_file_lock(f"{journal.journal_file(url)}.study-lock")  # Optuna's own lock is <journal>.lock
    backend = sqlalchemy.engine.make_url(url)
    if backend.get_backend_name() == "sqlite":
        private = backend.database and backend.database != ":memory:"
        return study_file_lock(f"{backend.database}.lock") if private else None
    if backend.get_backend_name() == "postgresql":
        return AdvisoryLock(url, name)
    return None


def close_study(url: str, out_dir: str | Path, study: str) -> None:
    """Give the study's folder, the default database's folder (both under `<out_dir>/sweeps/`: never a folder of
    the user's), and the storage's files and lock files where they are files, the modes the umask gives new ones
    (permissions.close_path): a study an older version left readable by every user is closed when resumed."""
    paths = [layout.study_dir(out_dir, study)]
    if journal.is_journal_file(url):
        if Path(url).parent.is_dir():
            path = journal.journal_file(url)
            paths += [path, Path(f"{path}.study-lock"), Path(f"{path}.heartbeats")]
    elif not journal.is_redis(url):
        backend = sqlalchemy.engine.make_url(url)
        if backend.get_backend_name() == "sqlite" and backend.database and backend.database != ":memory:":
            database = Path(backend.database)
            paths += [database, Path(f"{database}.lock")]
            if database.parent.parent.resolve() == (Path(out_dir) / layout.SWEEPS).resolve():
                paths.append(database.parent)
    for path in paths:
        close_path(path)


def study_file_lock(path: str) -> FileLock:
    """An flock on `path`, a file made with the umask's mode (filelock < 4 would otherwise make it 0644)."""
    return FileLock(path, mode=file_mode())


def acquire_file_lock(lock: FileLock, notice_after: float = NOTICE_AFTER_S) -> None:
    """Take `lock`, waiting as long as it takes; after `notice_after` s one line on stderr says what it waits for."""
    try:
        lock.acquire(timeout=notice_after)
    except Timeout:
        held = holder_text(lock.lock_file)
        print(f"waiting for the study lock {lock.lock_file}, held {held}: waited {notice_after:.0f} s so far, "
              "the sweep goes on once it is released", file=sys.stderr, flush=True)  # fmt: skip
        lock.acquire()


def lock_holders(path: str, table: str | None = None) -> list[int]:
    """The pids holding a lock on the file `path`, from the kernel's lock table (/proc/locks on Linux, where a
    waiter's line carries `->`); empty where none is shown (another OS, or a holder on another NFS host)."""
    try:
        status = os.stat(path)
        table = Path("/proc/locks").read_text() if table is None else table
    except OSError:
        return []
    exact = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    rows = [line.split() for line in table.splitlines()]
    held = [
        (fields[5], int(fields[4])) for fields in rows if len(fields) > 5 and fields[1] != "->" and fields[4].isdigit()
    ]
    # overlay file systems show the inode's own device, not the one stat() reports
    found = [pid for where, pid in held if where == exact] or [pid for where, pid in held
                                                               if where.endswith(f":{status.st_ino}")]  # fmt: skip
    return sorted(set(found))


def holder_text(path: str) -> str:
    """`by pid 123 (its command line)`, or `by another process` when the holder is not shown."""
    pids = lock_holders(path)
    if not pids:
        return "by another process"
    try:
        command = Path(f"/proc/{pids[0]}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    return f"by pid {pids[0]}" + (f" ({command[:100]})" if command else "")


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
                if isinstance(self.process, FileLock):
                    acquire_file_lock(self.process)
                else:
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
