"""Trial children: start one, stop one, and make it exit when its sweep process is gone.

Each child runs in a new session (`start_new_session=True`), so Ctrl-C in the terminal reaches only the
sweep, which then stops its children itself, and so the child's whole process group (DDP ranks
included) can be signalled at once. A child cannot learn portably that its parent died (Linux's
PR_SET_PDEATHSIG needs `preexec_fn`, unsafe with threads and absent on macOS), so `cli.py` starts
`start_watchdog()`: a daemon thread that polls its parent pid (named by PE_PARENT_PID) and, once the
child has been re-parented, terminates its own process group. Works on Linux and macOS. A trial the sweep
gave GPUs checks it sees them (`check_given_gpus`) and, when it shares them (--trials_per_gpu), caps its share
of their memory before anything is built. Every trial runs on its worker slot's cores (`pin_trial_cpus`: a cold
child pinned by its sweep as it starts, a forked one by itself).
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pe_core.errors import ConfigError
from pe_sweeps.layout import PARENT_ENV, TRIAL_CPUS_ENV, TRIAL_GPU_MEMORY_ENV, TRIAL_GPUS_ENV

STOP_GRACE_S = 10.0  # SIGTERM first, SIGKILL after this many seconds


def launch_child(argv: list[str], env: dict, log) -> subprocess.Popen:
    """Start one trial's child in its own session, told which process supervises it, on its slot's cores."""
    env = {**env, PARENT_ENV: str(os.getpid())}
    child = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    pin_trial_cpus(child.pid, env)  # just exec'd: the interpreter has started no thread yet
    return child


def stop_child(child: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the child's process group, SIGKILL it if still there after `grace` seconds. A warm child (not
    this process's own, so its pid is freed once its fork server reaps it) carries its start time (`started`):
    a group whose pid now names another process is left alone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if pid_reused(child.pid, getattr(child, "started", None)):
            break
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            child.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
    child.wait()


def _watch(parent: int, interval: float) -> None:
    while os.getppid() == parent:
        time.sleep(interval)
    os.killpg(os.getpgrp(), signal.SIGTERM)
    time.sleep(STOP_GRACE_S)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def process_started(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (`/proc/<pid>/stat` field 22), or None where that
    cannot be read (no /proc, the process gone): with the pid, it names one process even after the pid is reused."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2 :].split()[19])  # fields after "(comm)" begin at field 3
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid, started: int | None = None) -> bool:
    """Whether a process of that pid exists on this host (another user's counts: it exists); given `started`
    (`process_started` when the pid was recorded), also that it is the same process, not a later one of that pid."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError, TypeError, OverflowError):
        return False
    except PermissionError:
        pass
    return not pid_reused(pid, started)


def pid_reused(pid: int, started: int | None) -> bool:
    """Whether `pid` now names another process than the one that started at `started` (`process_started`
    when the pid was recorded); False when either is unknown. While any process of a group lives, its leader's
    pid is not handed out again, so a reused pid also means that group is gone."""
    now = process_started(pid) if started is not None else None
    return now is not None and now != started


def start_watchdog(interval: float = 1.0) -> None:
    """In a sweep's child (PE_PARENT_PID set, and the leader of the session `launch_child` made): exit with
    the sweep, even if it is already gone. A no-op elsewhere, DDP ranks started by the child included."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit() or os.getsid(0) != os.getpid():
        return
    threading.Thread(target=_watch, args=(int(parent), interval), daemon=True, name="pe-watchdog").start()


def pin_trial_cpus(pid: int = 0, env=None) -> None:
    """Run a sweep's trial, process `pid` (0: this one) of environment `env` (default: this one's), on the cores
    its worker slot was given (PE_TRIAL_CPUS; its threads and processes started later inherit them: Linux pins
    the one thread `pid` names). Skipped where the platform cannot pin (macOS) or the process is already gone;
    one warning line where these cores are not the process's to use."""
    given = (os.environ if env is None else env).get(TRIAL_CPUS_ENV, "")
    if not given or not hasattr(os, "sched_setaffinity"):
        return
    try:
        os.sched_setaffinity(pid, {int(core) for core in given.split(",")})
    except ProcessLookupError:
        pass
    except (OSError, ValueError) as error:
        print(f"warning: the trial given the cores {TRIAL_CPUS_ENV}={given!r} cannot be pinned to them ({error}); "
              "it runs on all of its sweep's cores", file=sys.stderr)  # fmt: skip


def check_given_gpus() -> None:
    """In a trial its sweep gave N GPUs (PE_TRIAL_GPUS, from --devices_per_trial): one line and exit 2 when this
    process sees fewer, instead of training on the CPU (Lightning's `accelerator: auto` would fall back to it).
    Sharing them (--trials_per_gpu: PE_TRIAL_GPU_MEMORY_FRACTION), it caps torch's allocator at that fraction of
    its GPU's memory, so that running out of it fails this trial alone, not its neighbours."""
    given = os.environ.get(TRIAL_GPUS_ENV, "")
    if not given.isdigit() or int(given) == 0:
        return
    import torch

    seen = torch.cuda.device_count()
    if seen < int(given):
        mask = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        raise ConfigError(f"this trial was given {given} GPU(s) (CUDA_VISIBLE_DEVICES={mask!r}) but sees {seen}: "
                          "it would train on the CPU; check the sweep's --devices_per_trial and --workers against "
                          "its visible GPUs")  # fmt: skip
    cap_gpu_memory()


def cap_gpu_memory() -> None:
    """`torch.cuda.set_per_process_memory_fraction` on the GPU this process trains on (a DDP rank's LOCAL_RANK,
    else the first of its visible GPUs) when its sweep shares GPUs between trials (PE_TRIAL_GPU_MEMORY_FRACTION)."""
    given = os.environ.get(TRIAL_GPU_MEMORY_ENV, "")
    if not given:
        return
    try:
        fraction = float(given)
    except ValueError:
        fraction = float("nan")
    if not 0 < fraction <= 1:
        raise ConfigError(f"{TRIAL_GPU_MEMORY_ENV} must be a number in (0, 1], got {given!r}")
    import torch

    rank = os.environ.get("LOCAL_RANK", "")
    torch.cuda.set_per_process_memory_fraction(fraction, int(rank) if rank.isdigit() else 0)
