"""How a command's exception ends the process: one line on stderr and an exit code (1 disk full, 2 a bad
name, size, option or file, or W&B refusing to start, 3 a diverged loss), or its traceback for anything else.
Light on purpose: `sweep` and `compare` use it without importing torch or Lightning (pe_sweeps/entry.py)."""

import errno
import os
import signal
import sys

from pe_core.errors import ConfigError, DivergedError


def exit_at_once_on_ctrl_c() -> None:
    """While a command imports its libraries, Ctrl-C exits 130 at once with one line. Raised as KeyboardInterrupt
    inside an import, it can be swallowed by an extension module's initialisation and come back as another error
    (numpy's lazy `linalg` recursing 900 deep; scipy's "type ObjSense is already registered"), exit 1 with a
    traceback. Nothing is written yet, so there is nothing to clean up."""
    command = " ".join(["cli.py", *sys.argv[1:2]])

    def stop(signum, frame):
        os.write(2, f"error: {command} stopped by SIGINT (Ctrl-C)\n".encode())
        os._exit(128 + signal.SIGINT)

    signal.signal(signal.SIGINT, stop)


def ctrl_c_raises() -> None:
    """The imports are done: Ctrl-C raises KeyboardInterrupt again, for the command to stop cleanly."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def exit_in_one_line(error: BaseException) -> None:
    """Print the one line and raise SystemExit for a user's error; return (the caller re-raises) otherwise."""
    full = disk_full(error)
    if full is not None:  # the run record (if it could be written) says `failed` with this reason
        print(f"error: disk full: {full}", file=sys.stderr)
        raise SystemExit(1) from None
    service = wandb_error(error)
    if service is not None:  # e.g. a rejected WANDB_API_KEY, or no network while online
        reason = (str(service).strip().splitlines() or [""])[0][:200]
        print(f"error: W&B could not start the run ({type(service).__name__}: {reason}); check WANDB_API_KEY "
              "and the network, or set WANDB_MODE=offline", file=sys.stderr)  # fmt: skip
        raise SystemExit(2) from None
    cause = user_error(error)
    if cause is not None:
        print(f"error: {cause}", file=sys.stderr)
        raise SystemExit(2 if isinstance(cause, ConfigError) else 3) from None


def wandb_error(error: BaseException | None) -> BaseException | None:
    """The W&B error (wandb.errors.Error: authentication, communication, usage) behind an exception."""
    while error is not None and not type(error).__module__.startswith("wandb.errors"):
        error = error.__cause__ or error.__context__
    return error


def disk_full(error: BaseException | None) -> OSError | None:
    """The ENOSPC error behind an exception, if any."""
    while error is not None and not (isinstance(error, OSError) and error.errno == errno.ENOSPC):
        error = error.__cause__ or error.__context__
    return error


def user_error(error: BaseException | None) -> ConfigError | DivergedError | None:
    """The ConfigError or DivergedError behind an exception (jsonargparse wraps the ones raised while
    instantiating); None for anything else, which keeps its traceback."""
    while error is not None and not isinstance(error, (ConfigError, DivergedError)):
        error = error.__cause__ or error.__context__
    return error
