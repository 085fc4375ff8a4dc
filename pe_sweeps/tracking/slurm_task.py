"""What each task of a `cli.py sweep --launcher slurm` job array runs (tracking/slurm.py submits it through
submitit, which pickles a `SweepTask` and calls it in the task)."""

import shlex
import signal
import subprocess
import time

import submitit

STOP_WAIT_S = 60  # a stopping sweep gets this long to re-queue its trials before it is killed


def ignore_usr2() -> None:
    """In the sweep a task starts: SLURM signals every process of the task, and SIGUSR2 (the time-limit
    warning) is the wrapper's to handle; left at its default it would kill the sweep outright."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


class SweepTask(submitit.helpers.Checkpointable):
    """One array task: runs the sweep command and, when submitit calls `checkpoint` (SIGUSR2: time limit or
    pre-emption), stops it with SIGTERM, so its running trials are re-queued, and asks to be requeued
    with the same command (the sweep resumes the study)."""

    def __init__(self, command: list[str]):
        self.command = command
        self.process: subprocess.Popen | None = None

    def __call__(self) -> int:
        self.process = subprocess.Popen(self.command, preexec_fn=ignore_usr2)
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
        return submitit.helpers.DelayedSubmission(SweepTask(self.command))

    def __getstate__(self) -> dict:  # a running process is never pickled with the task
        return {"command": self.command, "process": None}
