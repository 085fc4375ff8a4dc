"""`cli.py compare --save_runs FILE` and `--from FILE`: the runs a comparison considered, kept in one small JSON
file, so that its tables can be recomputed without the run folders or the sweep's study (docs/results/).

    {"schema_version": 1, "command": "python cli.py compare --sweep=repro_alibi ...", "commit": "5bfe2be",
     "dirty": false, "created": "2026-01-01T12:00:00+00:00", "sweep": "repro_alibi",
     "spec": {"metrics": [...], "parameters": {...}, "roles": {...}, "compare_rows": null},
     "records": [{"name": ..., "status": "finished", "seed": 1, "config": {...}, "final": {...}, ...}]}

`spec` is what compare read about the sweep (spec.py: its metrics and goals, parameters and their
roles, a reseed study's rows), so `--from FILE` shows the sweep's default metrics and rows. `records` are
every run the comparison considered, the ones it left out included (their status and metrics say why):
each a RunRecord less its W&B and timing fields (SAVED_FIELDS) and with only the shown metrics of its
history (for `--value step=N`), its `run_dir` relative to the --out_dir it was read from, and its latest
per-example evaluation outcomes of each stage packed in (`outcomes`: runs/outcomes.py, read back with
`outcome_table`; about 2 bytes per example and float column). `final` and `best`
keep every summary metric but, of the per-length families (`val/acc_len_<n>`, `val/ppl_ctx_<n>`), only the
metrics the comparison showed: a Ruoss run logs hundreds.
`commit` is the source checkout's `git rev-parse --short HEAD` (null outside a git checkout), `dirty`
whether it had uncommitted changes to tracked files.
"""

import json
import re
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pe_core.errors import ConfigError
from pe_sweeps.runs.outcomes import outcome_table, pack
from pe_sweeps.runs.records import RunRecord, write_atomic

SCHEMA_VERSION = 1
# the record fields compare reads (identity, status, setup, values) and `updated_at` (the newest run per seed wins)
SAVED_FIELDS = ("name", "group", "task", "encoding", "distinct", "seed", "data_seed", "sweep", "subcommand", "status",
                "config", "final", "best", "world_size", "num_devices", "num_nodes", "precision",
                "global_batch_size", "matmul_precision", "updated_at", "run_dir", "schema_version",
                "history", "outcomes")  # fmt: skip
# what spec's objectives, default_rows and tuned_keys read of a sweep, and its `compare:` block (margin, primary)
SPEC_KEYS = ("metric", "metrics", "parameters", "roles", "compare_rows", "compare")
PER_LENGTH = re.compile(r"_\d+$")  # val/acc_len_8, val/ppl_ctx_64 (selection.check_metric's `_<n>`)
SOURCE_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SavedRuns:
    """A `--save_runs` file: the runs of one comparison, the sweep's spec and where they came from."""

    records: list[RunRecord]
    spec: dict = field(default_factory=dict)
    sweep: str | None = None
    command: str | None = None
    commit: str | None = None
    dirty: bool | None = None
    created: str | None = None
    schema_version: int = SCHEMA_VERSION


def git(*args: str) -> str | None:
    """A git command's output in the source checkout; None without git or outside a checkout."""
    try:
        done = subprocess.run(["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def relative(run_dir: str | None, out_dir: str | None) -> str | None:
    """A local run's folder relative to the --out_dir it was read from (a W&B run's URL as it is)."""
    if run_dir is None or out_dir is None or not Path(run_dir).is_relative_to(out_dir):
        return run_dir
    return Path(run_dir).relative_to(out_dir).as_posix()


def reduced(record: RunRecord, shown: list[str], out_dir: str | None) -> dict:
    """The record as saved: SAVED_FIELDS only, per-length metrics only where shown, history rows with the
    shown metrics only (and the validations that logged none of them left out)."""
    data = record.to_dict() | {"run_dir": relative(record.run_dir, out_dir)}
    kept = {key: data[key] for key in SAVED_FIELDS}
    for key in ("final", "best"):
        kept[key] = {m: v for m, v in data[key].items() if m in shown or not PER_LENGTH.search(m)}
    rows = [{k: v for k, v in row.items() if k in shown or k == "step"} for row in data["history"]]
    kept["history"] = [row for row in rows if len(row) > 1]
    kept["outcomes"] = packed_outcomes(record)
    return kept


def packed_outcomes(record: RunRecord) -> dict:
    """The run's latest per-example outcomes of each stage, packed into the file (runs/outcomes.py `pack`), so
    `--from FILE` can resample the evaluation examples without the run folder; without the per-example content
    digests (the pointer's `fingerprint` says which examples were evaluated). A table no longer on disk is left
    out (its pointer kept, without `table`)."""
    packed = {}
    for stage, pointer in (record.outcomes or {}).items():
        if "table" in pointer:  # read from a saved file: already packed
            packed[stage] = pointer
            continue
        table = outcome_table(record, stage)
        table = None if table is None else {k: v for k, v in table.items() if k != "hash"}
        packed[stage] = dict(pointer) | ({"table": pack(table)} if table is not None else {})
    return packed


def save_runs(path: str, records: list[RunRecord], spec: dict, sweep: str | None, shown: list[str],
              command: str, out_dir: str | None) -> int:  # fmt: skip
    """Write the file (atomically); returns its size in bytes. A path that cannot be written is one line."""
    commit = git("rev-parse", "--short", "HEAD")
    data = {
        "schema_version": SCHEMA_VERSION, "command": command, "commit": commit,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "sweep": sweep,
        "spec": {k: v for k, v in spec.items() if k in SPEC_KEYS},
        "records": [reduced(r, shown, out_dir) for r in records],
    }  # fmt: skip
    text = json.dumps(data, indent=1) + "\n"
    try:
        write_atomic(Path(path), text)
    except OSError as error:
        raise ConfigError(f"--save_runs {path}: cannot write it ({error.strerror or error})") from None
    return len(text.encode())


def read_saved_runs(path: str) -> SavedRuns:
    """The file written by `--save_runs`; a missing file or one that is not such a file is one line naming it."""
    where = f"--from {path}"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file (write one with `cli.py compare --save_runs FILE`)") from None
    except OSError as error:
        raise ConfigError(f"{where}: cannot read it ({error.strerror or error})") from None
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        raise ConfigError(f"{where}: not JSON ({str(error).splitlines()[0][:120]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ConfigError(f"{where}: not a file of `compare --save_runs` (no 'records' list)")
    version = data.get("schema_version")
    if not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
        raise ConfigError(f"{where}: schema_version {version!r}; this version reads 1 to {SCHEMA_VERSION}")
    if not isinstance(data.get("spec", {}), dict):
        raise ConfigError(f"{where}: 'spec' is a {type(data['spec']).__name__}, not an object")
    records = []
    for i, item in enumerate(data["records"]):
        try:
            records.append(RunRecord.from_dict(item))
        except (ValueError, TypeError) as error:
            raise ConfigError(f"{where}: records[{i}] is not a run record ({error})") from None
    if not records:
        raise ConfigError(f"{where}: no runs in it")
    known = {k: data[k] for k in ("spec", "sweep", "command", "commit", "dirty", "created") if k in data}
    return SavedRuns(records, **known, schema_version=version)
