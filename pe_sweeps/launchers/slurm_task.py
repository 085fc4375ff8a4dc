"""What each task of a `cli.py sweep --launcher slurm` job array runs (launchers/slurm.py submits it through
submitit, which pickles a `SweepTask` and calls it in the task)."""

import os
import shlex
import signal
import subprocess
import time

import submitit

from pe_sweeps.layout import STORAGE_ENV

STOP_WAIT_S = 60  # a stopping sweep gets this long to re-queue its trials before it is killed


def ignore_usr2() -> None:
    """In the sweep a task starts: SLURM signals every process of the task, and SIGUSR2 (the time-limit
    warning) is the wrapper's to handle; left at its default it would kill the sweep outright."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def sweep_preexec(umask: int | None):
    """The sweep's set-up in its own process: SIGUSR2 ignored (`ignore_usr2`) and, when given, the submitting
    shell's umask: the task runs under 077 (its job folder's files are private), the sweep's results need not."""

    def setup() -> None:
        ignore_usr2()
        if umask is not None:
            os.umask(umask)

    return setup


class SweepTask(submitit.helpers.Checkpointable):
    """One array task: runs the sweep command and, when submitit calls `checkpoint` (SIGUSR2: time limit or
    pre-emption), stops it with SIGTERM, so its running trials are re-queued, and asks to be requeued
    with the same command (the sweep resumes the study). `umask`: the sweep's (the submitting shell's);
    `storage_from_env`: the sweep's storage URL is in $PE_SWEEP_STORAGE (it holds a password), not in `command`."""

    umask: int | None = None  # the defaults of a task pickled before these existed
    storage_from_env = False

    def __init__(self, command: list[str], umask: int | None = None, storage_from_env: bool = False):
        self.command = command
        self.umask = umask
        self.storage_from_env = storage_from_env
        self.process: subprocess.Popen | None = None

    def __call__(self) -> int:
        if self.storage_from_env and not os.environ.get(STORAGE_ENV):
            raise RuntimeError(
                f"${STORAGE_ENV} (the sweep's storage URL) is not in this task's environment; submit with the "
                "environment passed on (no --export=NONE, no SBATCH_EXPORT=NONE)"
            )
        self.process = subprocess.Popen(self.command, preexec_fn=sweep_preexec(self.umask))
        # polled, not wait()ed: a blocking wait holds the lock that `checkpoint`'s own wait needs, and
        # `checkpoint` runs in a signal handler on this thread, inside whatever this loop is doing
        while (code := self.process.poll()) is None:
            time.sleep(0.5)
        if code:
            raise RuntimeError(f"the sweep exited with status {code}: {shlex.join(self.command)}")
        return code

    def checkpoint(self):
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return submitit.helpers.DelayedSubmission(SweepTask(self.command, self.umask, self.storage_from_env))

    def __getstate__(self) -> dict:  # a running process is never pickled with the task
        return {**self.__dict__, "process": None}
