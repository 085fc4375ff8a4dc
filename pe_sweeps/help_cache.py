"""Every `cli.py SUBCOMMAND --help` printed from a cache once it has been built: `fit --help` needs Lightning's
Trainer and every class's signature (importing torch and Lightning, then jsonargparse's introspection: 10-40 s on
a busy 2-core machine), but its text changes only with what it is computed from. Light on purpose: stdlib only.

The key of a help is everything its text depends on: the command line (help flags and the subcommand only, no
--config), the width argparse wraps to, the interpreter, the project's source files and the installed libraries
that build it (path, size and modification time, as Python's own bytecode cache), the environment variables
that set defaults (PE_*, WANDB_*, HOME, XDG_*) and the working folder. A miss runs the command as before and
keeps what it printed; a hit prints it without importing anything else. The cache lives in `$PE_CACHE_DIR/help`
(default `$XDG_CACHE_HOME/pe-sweeps/help` or `~/.cache/pe-sweeps/help`); `PE_CACHE_DIR=` (empty) turns it off.
"""

import contextlib
import hashlib
import importlib.util
import io
import os
import shutil
import sys
from pathlib import Path

from pe_sweeps.layout import CACHE_ENV

HELP_FLAGS = ("-h", "--help")
COMMANDS = ("fit", "validate", "test", "predict", "sweep", "compare", "probe")
PROJECT = Path(__file__).resolve().parent.parent
SOURCES = ("pe_core", "lightning_modules", "datamodules", "pe_sweeps")  # the packages every help is built from
LIBRARIES = ("torch", "pytorch_lightning", "lightning_fabric", "jsonargparse", "docstring_parser", "typeshed_client",
             "wandb", "optuna", "datasets", "transformers", "rich")  # fmt: skip
ENV_PREFIXES = ("PE_", "WANDB_", "XDG_")
KEPT = 64  # help texts kept; older ones are removed


def is_help(argv: list[str]) -> bool:
    """Whether `argv` only asks for a subcommand's help: `fit --help`, `probe -h`, `fit --model.help NAME`
    (nothing else given, so the text depends on the key's inputs only)."""
    if not argv or argv[0] not in COMMANDS:
        return False
    rest, asked = argv[1:], False
    while rest:
        arg = rest.pop(0)
        if arg in HELP_FLAGS:
            asked = True
        elif arg.startswith("--") and arg.split("=", 1)[0].endswith(".help"):  # --model.help [NAME]
            asked = True
            if "=" not in arg and rest and not rest[0].startswith("-"):
                rest.pop(0)
        else:
            return False
    return asked


def cache_dir() -> Path | None:
    """Where help texts are kept; None when `PE_CACHE_DIR` is set empty."""
    root = os.environ.get(CACHE_ENV)
    if root is None:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pe-sweeps"
    return Path(root) / "help" if str(root) else None


def stamp(path: Path, digest) -> None:
    """Add each .py file under `path` (or the file itself) to `digest`: its path, size and modification time."""
    if path.is_file():
        found = [path]
    else:
        found = sorted(path.rglob("*.py"))
    for file in found:
        try:
            info = file.stat()
        except OSError:
            continue
        digest.update(f"{file}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())


def library_path(name: str) -> Path | None:
    """The file a library is imported from (its `__init__.py`), found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def help_key(argv: list[str]) -> str:
    """The hash of everything the help of `argv` is computed from (module docstring)."""
    digest = hashlib.sha256()
    columns = shutil.get_terminal_size().columns  # what argparse's formatter wraps to
    digest.update(repr((argv, columns, sys.version, sys.executable, os.getcwd())).encode())
    names = sorted(k for k in os.environ if k.startswith(ENV_PREFIXES) or k == "HOME")
    digest.update(repr([(k, os.environ[k]) for k in names]).encode())  # hashed, never stored as such
    for package in SOURCES:
        stamp(PROJECT / package, digest)
    for name in LIBRARIES:
        path = library_path(name)
        if path is not None:
            stamp(path, digest)
            stamp(path.parent.parent / f"{name}.pth", digest)  # an editable install's pointer, if any
    return digest.hexdigest()


def cached_help(argv: list[str]) -> str | None:
    """The help text kept for `argv`, or None (not built yet, changed since, or the cache is off)."""
    folder = cache_dir()
    if folder is None or not is_help(argv):
        return None
    try:
        return (folder / f"{help_key(argv)}.txt").read_text()
    except (OSError, UnicodeDecodeError):
        return None


def keep_help(argv: list[str], text: str) -> None:
    """Keep `text` as the help of `argv` (written whole or not at all); a cache that cannot be written is
    skipped: it only saves time."""
    folder = cache_dir()
    if folder is None or not text:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{help_key(argv)}.txt"
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)
        kept = sorted(folder.glob("*.txt"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEPT:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


class Tee(io.TextIOBase):
    """Writes to `stream` and keeps a copy of what was written."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()


@contextlib.contextmanager
def recorded_help(argv: list[str]):
    """Run a help command inside this block: what it prints on stdout is kept for `argv` when it ends well
    (exit 0 or a return)."""
    tee = Tee(sys.stdout)
    sys.stdout = tee
    try:
        yield
    except SystemExit as exit_:
        if exit_.code in (0, None):
            keep_help(argv, tee.copy.getvalue())
        raise
    else:
        keep_help(argv, tee.copy.getvalue())
    finally:
        sys.stdout = tee.stream
