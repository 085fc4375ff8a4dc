"""Who may read what this project writes. Every command (`fit`, `sweep`, a sweep's trials, `compare`) runs
under umask 077, so the run and sweep folders it makes are 0700 and their files 0600: another user on the
machine can neither read a study, its records, logs, checkpoints or W&B files, nor open (and so hold) its lock.
`PE_UMASK` replaces that umask, e.g. `PE_UMASK=007` to share a sweep with the group of its folder (docs/sweeps.md,
"Sharing a sweep with a group"). Trials inherit the sweep's umask and environment."""

import os
import stat
from pathlib import Path

from pe_core.errors import ConfigError
from pe_sweeps.layout import UMASK_ENV

PRIVATE_UMASK = 0o077  # the default: only the user who runs the command


def umask_setting(environ=os.environ) -> int:
    """The umask the project's commands run under: $PE_UMASK (octal) when set, else 077; a value that is not an
    octal number from 000 to 777 is a one-line ConfigError."""
    value = environ.get(UMASK_ENV, "").strip()
    if not value:
        return PRIVATE_UMASK
    digits = value.removeprefix("0o")
    if not digits or not set(digits) <= set("01234567") or int(digits, 8) > 0o777:
        raise ConfigError(f"${UMASK_ENV} must be an octal umask from 000 to 777 (077, the default: only you; "
                          f"007: your group too), got {value!r}")  # fmt: skip
    return int(digits, 8)


def apply_umask(environ=os.environ) -> int:
    """Set this process's umask (and so its children's) to `umask_setting`; returns it."""
    mask = umask_setting(environ)
    os.umask(mask)
    return mask


def current_umask() -> int:
    """This process's umask, read without changing it where Linux shows it (/proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # elsewhere: set and restore (not atomic, hence only the fallback)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets under the current umask (0600 under 077)."""
    return 0o666 & ~current_umask()


def close_path(path: Path) -> None:
    """Give an existing folder or file of this user the mode a new one gets under the current umask (a folder
    keeps its setgid bit, which gives a shared folder's files its group): a study an older version made 0755 /
    0644 is closed to other users when a sweep resumes it. Paths of other users, missing paths and paths that
    cannot be changed are left as they are."""
    try:
        status = path.stat()
        mode = stat.S_IMODE(status.st_mode)
        folder = stat.S_ISDIR(status.st_mode)
        wanted = mode & 0o7000 | 0o777 & ~current_umask() if folder else file_mode()
        if status.st_uid == os.geteuid() and mode != wanted:
            path.chmod(wanted)
    except OSError:
        pass
