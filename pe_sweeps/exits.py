"""How a command's exception ends the process: one line on stderr and an exit code (1 disk full, 2 a bad
name, size, option or file, or W&B refusing to start, 3 a diverged loss), or its traceback for anything else.
Light on purpose: `sweep` and `compare` use it without importing torch or Lightning (pe_sweeps/entry.py)."""

import errno
import sys

from pe_core.errors import ConfigError, DivergedError


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
