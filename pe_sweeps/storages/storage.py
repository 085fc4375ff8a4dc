"""The sweep's storage: opening it from a URL, its heartbeats and stale trials, retrying its transient errors
(`retrying`), and its errors as one line (URLs and their passwords: storages/storage_url.py).

Every call the sweep makes on a storage beyond Optuna's public `Study` API goes through this module, so a
storage kind is added here alone:
- `open_storage(url, heartbeat)`: SQLAlchemy URLs (SQLite, PostgreSQL) open Optuna's RDBStorage; a file path
  opens a journal file and `redis://` a Redis journal (storages/journal_storage.py: Optuna's JournalStorage
  with heartbeats);
- `record_heartbeat(storage, trial_id)`: the trial's sweep process is alive;
- `stale_trial_ids(storage, study_id)`: RUNNING trials whose last heartbeat is older than the grace period,
  judged on one clock (RDBStorage: the database's `now()` against heartbeats the database stamped; journals:
  the file system's or the Redis server's);
- `check_clock(url)`: refuses in one line when this host's clock and the storage's differ by more than a
  quarter of the grace period (SQLite stamps heartbeats with each writer's own clock).
"""

import errno
import os
import sys
import threading
import time
from pathlib import Path

import optuna
import sqlalchemy

from pe_core.errors import ConfigError
from pe_sweeps import internals
from pe_sweeps.storages import journal_storage as journal
from pe_sweeps.storages.storage_url import hide_secrets, redact_url

SQLITE_TIMEOUT_S = 20  # SQLite busy timeout; the heartbeat grace period is longer (see `grace_period`)


def grace_period(heartbeat: int) -> int:
    """Seconds without a heartbeat before a trial counts as dead: longer than a heartbeat that waited the
    whole SQLite busy timeout for the database."""
    return 3 * heartbeat + SQLITE_TIMEOUT_S


def transient_errors() -> tuple[type[BaseException], ...]:
    """Errors of a storage call worth retrying: a locked SQLite file, a dropped database or Redis connection."""
    errors: tuple[type[BaseException], ...] = (sqlalchemy.exc.DBAPIError,)
    try:
        import redis

        errors += (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.BusyLoadingError)
    except ImportError:
        pass
    return errors


def is_transient(error: BaseException) -> bool:
    """A storage error worth retrying (`transient_errors`), also when Optuna wraps it in its StorageInternalError
    ("An exception is raised during the commit"), as its RDB storage does for every failed session."""
    if isinstance(error, optuna.exceptions.StorageInternalError):
        error = error.__cause__
    return isinstance(error, transient_errors())


DEFAULT_OUTAGE_LIMIT_S = 300  # --storage_outage's default


class StorageOutage(Exception):
    """The storage stayed unreachable longer than the outage limit: the sweep stops (its one line)."""


class Outage:
    """The sweep process's view of its storage being unreachable, shared by its threads: one line when an outage
    starts and one when it ends, and `StorageOutage` once it has lasted longer than `limit` seconds. `quiet_until`
    (monotonic): until then heartbeats are not judged, as every process's went unrecorded during the outage."""

    def __init__(self, limit: float = DEFAULT_OUTAGE_LIMIT_S, grace: float = 0.0):
        self.lock = threading.Lock()
        self.configure(limit, grace)

    def configure(self, limit: float, grace: float) -> None:
        """A new sweep's limit (seconds) and its grace after an outage (seconds: every live sweep has beaten)."""
        self.limit, self.grace, self.since, self.quiet_until, self.gave_up = limit, grace, None, 0.0, None

    def failed(self, error: BaseException, may_raise: bool = True) -> None:
        """A storage call failed with a transient error: note the outage's start (one line), and past the limit
        raise StorageOutage (`may_raise`: the caller is a step that may stop the sweep)."""
        with self.lock:
            now = time.monotonic()
            if self.since is None:
                self.since = now
                print(f"warning: storage unavailable ({error_line(error)}); retrying with backoff for up to "
                      f"{self.limit:.0f} s (--storage_outage)", file=sys.stderr, flush=True)  # fmt: skip
            if may_raise and now - self.since > self.limit:
                limit = f"{self.limit:.0f}"
                self.gave_up = self.gave_up or (
                    f"storage unavailable for more than {limit} s (--storage_outage {limit}): {error_line(error)}"
                )
                raise StorageOutage(self.gave_up)

    def succeeded(self) -> None:
        """A storage call succeeded: an outage in progress has ended (one line)."""
        if self.since is None:
            return
        with self.lock:
            if self.since is not None:
                took, self.since = time.monotonic() - self.since, None
                self.quiet_until = time.monotonic() + self.grace
                print(f"storage available again after {took:.0f} s; the sweep goes on", file=sys.stderr, flush=True)

    def judging_heartbeats(self) -> bool:
        """False during an outage and for a grace period after it: heartbeats could not be written."""
        return self.since is None and time.monotonic() >= self.quiet_until


OUTAGE = Outage()  # one sweep per process: its workers, heartbeats and display share it


def retrying(action, *args):
    """Run `action(*args)`, retrying transient storage errors (a locked SQLite file, a dropped connection, a
    database restarting) with backoff for as long as the outage limit allows (`OUTAGE`); then StorageOutage."""
    attempt = 0
    while True:
        try:
            result = action(*args)
        except Exception as error:  # OperationalError, InterfaceError, Redis' ConnectionError, Optuna's wrapping
            if not is_transient(error):
                raise
            OUTAGE.failed(error)
            time.sleep(min(0.5 * 2**attempt, 5.0))
            attempt += 1
            continue
        OUTAGE.succeeded()
        return result


def open_storage(url: str, heartbeat: int) -> optuna.storages.BaseStorage:
    """The study's storage for `url`, with heartbeats every `heartbeat` s (stale after `grace_period`)."""
    if journal.is_redis(url) or journal.is_journal_file(url):
        try:
            return journal.open_journal(url, grace_period(heartbeat))
        except (OSError, ImportError, ValueError, *transient_errors()) as error:
            raise storage_error(url, error) from None
    engine = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    failure: BaseException | None = None
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(
                url, engine_kwargs=engine, heartbeat_interval=heartbeat, grace_period=grace_period(heartbeat),
            )  # fmt: skip
        except (
            sqlalchemy.exc.IntegrityError,
            sqlalchemy.exc.ProgrammingError,
            sqlalchemy.exc.OperationalError,
        ) as error:
            # Two processes starting on an empty database both create Optuna's tables; the loser of that race
            # gets a duplicate-key or "already exists" error and only has to open the tables the winner made.
            failure = error
            if isinstance(error, sqlalchemy.exc.OperationalError) and "already exists" not in str(error):
                break
            time.sleep(0.5 + attempt)
        except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError, RuntimeError) as error:
            failure = error  # RuntimeError: tables of another Optuna version's schema (Optuna names the fix)
            break
    raise storage_error(url, failure) from None


def storage_error(url: str, error: BaseException | None) -> ConfigError:
    """The one line for a storage that cannot be opened or locked, its password hidden."""
    reason = hide_secrets(str(error).strip().splitlines()[0][:200], url)
    return ConfigError(f"cannot open sweep storage {redact_url(url)}: {reason}")


def error_line(error: BaseException) -> str:
    """One line for a failed storage call: its root cause (Optuna wraps every failed commit in a message about
    "exceeding max length"), and "disk full" first when the disk is."""
    root = error
    while root.__cause__ is not None:
        root = root.__cause__
    text = (str(root).strip().splitlines() or [""])[0][:200]
    if getattr(root, "errno", None) == errno.ENOSPC or "disk is full" in text or "No space left" in text:
        return f"disk full: {text}"
    return f"{type(root).__name__}: {text}" if text else type(root).__name__


def record_heartbeat(storage: optuna.storages.BaseStorage, trial_id: int) -> None:
    """Stamp the trial's heartbeat (the storage's clock)."""
    storage.record_heartbeat(trial_id)


def stale_trial_ids(storage: optuna.storages.BaseStorage, study_id: int) -> list[int]:
    """RUNNING trials of the study whose last heartbeat is older than the storage's grace period (none for a
    storage without heartbeats, e.g. in memory)."""
    if isinstance(storage, journal.HeartbeatJournalStorage):
        return storage.stale_trial_ids(study_id)
    if getattr(storage, "get_heartbeat_interval", lambda: None)() is None:
        return []
    return internals.rdb_stale_trial_ids(storage, study_id)


NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "fuse.sshfs",
                       "9p", "afs", "glusterfs", "fuse.glusterfs", "orangefs", "panfs"}  # fmt: skip


def filesystem_type(path: Path, mount_table: Path = Path("/proc/self/mounts")) -> str:
    """The type of the file system holding `path` (from the mount table; '' where it cannot be read)."""
    try:
        mounts = [line.split() for line in mount_table.read_text().splitlines()]
    except OSError:
        return ""
    resolved, best = str(path.resolve()), ("", "")
    for fields in mounts:
        point = fields[1].replace("\\040", " ")
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if len(fields) > 2 and inside and len(point) >= len(best[0]):
            best = (point, fields[2])
    return best[1]


def network_filesystem_warning(url: str) -> str | None:
    """One warning line when an SQLite study lives on a network filesystem, where SQLite's locking is
    unreliable (Optuna's FAQ): point to the journal file storage."""
    path = sqlite_file(url)
    kind = filesystem_type(path.parent) if path is not None and path.parent.is_dir() else ""
    if kind not in NETWORK_FILESYSTEMS:
        return None
    return (f"warning: the SQLite study {path} is on a network filesystem ({kind}), where SQLite's locks are "
            f"unreliable: use a journal file (--storage {path.with_suffix('.log')}) or PostgreSQL")  # fmt: skip


def sqlite_file(url: str) -> Path | None:
    if journal.is_redis(url) or journal.is_journal_file(url):
        return None
    backend = sqlalchemy.engine.make_url(url)
    if backend.get_backend_name() != "sqlite" or not backend.database or backend.database == ":memory:":
        return None
    return Path(backend.database)


def clock_skew(folder: Path) -> float:
    """Seconds this host's clock is ahead of the clock that stamps files in `folder` (a file server's on a
    network filesystem; 0 on a local disk, up to the file system's timestamp resolution)."""
    probe = folder / f".clock-{os.getpid()}"
    try:
        before = time.time()
        probe.write_bytes(b"")
        after = time.time()
        stamped = probe.stat().st_mtime
    finally:
        probe.unlink(missing_ok=True)
    return (before + after) / 2 - stamped


def check_clock(url: str, heartbeat: int) -> None:
    """One line (ConfigError) when heartbeats would be stamped by clocks too far apart to judge staleness:
    an SQLite study's writers each stamp with their own clock, so this host must agree with the file's."""
    path = sqlite_file(url)
    if path is None or not path.parent.is_dir():
        return
    skew, limit = clock_skew(path.parent), grace_period(heartbeat) / 4
    if abs(skew) > limit:
        raise ConfigError(
            f"this host's clock is {skew:+.1f} s off the clock of {path.parent} (more than {limit:.0f} s): sweeps "
            "on several hosts sharing an SQLite study would judge each other's heartbeats stale; sync the clocks "
            "(NTP) or use a PostgreSQL --storage"
        )
