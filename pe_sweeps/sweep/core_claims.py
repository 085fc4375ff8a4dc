"""Which cores the running sweeps of this machine's user give their CPU trials, so a second sweep started beside a
first says so instead of crawling unannounced: each process's trials take `--threads_per_trial` threads (by default
all its cores, split among its own workers), so two sweeps on one machine run twice as many threads as cores (one
such trial ran at about an eighth of its speed alone).

A sweep that trains on the CPU writes a claim, `<tmp>/pe-sweeps-<uid>/cores-<pid>.json` (its pid, its cores and
the threads its workers run, and on Linux the process's start time), for as long as it runs; a claim whose process
is gone, or whose pid now belongs to a process started later, is stale and removed. GPU trials claim nothing: their
threads feed a GPU."""

import json
import os
import stat
import sys
import tempfile
from pathlib import Path

from pe_sweeps.sweep.children import pid_alive, process_started
from pe_sweeps.sweep.trial_devices import cpu_set


def claims_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"pe-sweeps-{os.getuid()}"


def private(folder: Path) -> bool:
    """Whether `folder` is a directory of this user's that no one else may write to (not a link): in a shared /tmp
    another user could make the folder first, with a link in it to a file of ours to overwrite."""
    info = os.lstat(folder)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def stale(claim: dict) -> bool:
    """Whether a claim's sweep is gone: its pid dead, or reused by a process that started at another time."""
    return not pid_alive(int(claim["pid"]), claim.get("started"))


def other_claims(folder: Path, cores: set[int]) -> list[dict]:
    """The live claims of other processes on any of `cores`; stale ones (their process gone) are removed."""
    found = []
    for path in folder.glob("cores-*.json"):
        try:
            claim = json.loads(path.read_text())
            pid, theirs = int(claim["pid"]), set(claim["cores"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not ours to read
        if pid == os.getpid():
            continue
        if stale(claim):
            path.unlink(missing_ok=True)
        elif theirs & cores:
            found.append(claim)
    return found


class CoreClaim:
    """This sweep's claim on its cores while it runs (a context manager); on entering, one warning line when the
    threads of the sweeps already running on these cores and this one's add up to more than the cores."""

    def __init__(self, threads: int, label: str, folder: Path | None = None):
        self.threads, self.label = threads, label
        self.folder = folder or claims_dir()
        self.path = self.folder / f"cores-{os.getpid()}.json"
        self.written = False

    def __enter__(self) -> "CoreClaim":
        cores = cpu_set()
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not private(self.folder):
                return self  # not ours alone: no claim, no warning (the sweep itself is unaffected)
            others = other_claims(self.folder, cores)
            self.path.write_text(json.dumps({"pid": os.getpid(), "started": process_started(os.getpid()),
                                             "cores": sorted(cores), "threads": self.threads,
                                             "sweep": self.label}))  # fmt: skip
            self.written = True
        except OSError:  # no writable temp folder: the sweep runs, unannounced
            return self
        warning = oversubscribed(others, self.threads, cores)
        if warning:
            print(warning, file=sys.stderr)
        return self

    def __exit__(self, *exc) -> None:
        if self.written:
            self.path.unlink(missing_ok=True)


def oversubscribed(others: list[dict], threads: int, cores: set[int]) -> str | None:
    """The warning line when the other sweeps' trial threads and this one's exceed the cores they share."""
    shared = set(cores).union(*(set(c["cores"]) for c in others)) if others else set(cores)
    total = threads + sum(int(c["threads"]) for c in others)
    if not others or total <= len(shared):
        return None
    who = ", ".join(f"pid {c['pid']} ({c['sweep']}, {c['threads']} thread(s))" for c in others)
    return (
        f"warning: {len(others)} other sweep(s) already train on these {len(shared)} cores: {who}; with this "
        f"one's {threads} thread(s) that is {total} threads on {len(shared)} cores, and every trial will run slower "
        f"than alone. Split the cores with --workers and --threads_per_trial (e.g. --threads_per_trial 1), or wait"
    )
