"""Local run records: one `record.json` per run that `cli.py compare` reads (and W&B mirrors).

A record holds the resolved config, identity (task, encoding, seed, sweep), what `devices: auto` resolved to
(world size, devices, nodes, precision, the global batch), status
(running / finished / failed / diverged / interrupted), the final and best value of every metric,
and the history of validation metrics. It is rewritten atomically at every validation, so a run
killed mid-way still leaves what it had measured. A fit resumed from one of the run's checkpoints continues
the same record (its history cut back to the checkpoint's step; `resumes` says when) and W&B run.

The record is a RunRecord (a dataclass with a `schema_version`), written by RecordWriter
(record_writer.py, a Lightning callback) through
`write_record` and read through `read_record` / `load_records`: this module is the only one that knows
its JSON. Records written before the schema was versioned (version 0) read with the same fields.
"""

import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pe_core.errors import ConfigError
from pe_sweeps.layout import MAX_NAME_BYTES, RECORD_FILE

SCHEMA_VERSION = 1  # 0: the records written before the schema had a version (same fields, no `schema_version`)
STATUSES = ("running", "finished", "failed", "diverged", "interrupted")


@dataclass
class RunRecord:
    """One run's `record.json`, typed: what `cli.py fit/validate/test` writes (RecordWriter) and what compare,
    the sweep runner, its live view, reseed and `init_from: run:NAME` read. Written and read by this module
    only (`write_record`, `read_record`); unknown top-level keys are kept in `extra` and written back."""

    # identity
    name: str | None = None
    group: str | None = None
    task: str | None = None
    encoding: str | None = None
    distinct: dict = field(default_factory=dict)  # what sets the run apart beyond task, encoding, seed (run_naming)
    seed: int | None = None
    data_seed: int | None = None
    sweep: str | None = None
    subcommand: str | None = None
    # outcome
    status: str = "running"
    error: str | None = None
    config: dict = field(default_factory=dict)  # the resolved config
    final: dict = field(default_factory=dict)  # metric -> last value
    best: dict = field(default_factory=dict)  # metric -> best value by its goal
    history: list = field(default_factory=list)  # one row per validation: step, wandb_step, val/* metrics
    resumes: list = field(default_factory=list)  # {at, previous_status, step} per resume from a checkpoint
    wandb: dict = field(default_factory=dict)  # the W&B run: id, path, mode, dir, dirs
    checkpoints: dict = field(default_factory=dict)  # name ("last") -> {path, step}: the step each one holds
    # stage -> the latest evaluation's per-example outcomes: {path, step, examples, fingerprint} (runs/outcomes.py)
    outcomes: dict = field(default_factory=dict)
    # what `devices: auto` resolved to (compare's SETUP), and TF32
    world_size: int | None = None
    num_devices: int | None = None
    num_nodes: int | None = None
    precision: str | None = None
    global_batch_size: int | None = None
    matmul_precision: str | None = None
    # progress and timing (the sweep's live view)
    step: int | None = None
    max_steps: int | None = None
    global_step: int | None = None
    first_step: int | None = None
    process_start: float | None = None
    started_at: float | None = None
    first_step_at: float | None = None
    startup_seconds: float | None = None
    updated_at: float | None = None
    schema_version: int = SCHEMA_VERSION
    extra: dict = field(default_factory=dict)  # top-level keys this version does not know, kept as they are
    run_dir: str | None = None  # where it was read from (not written)

    @classmethod
    def from_dict(cls, data: dict) -> "RunRecord":
        """A record from its JSON object (any schema version up to ours); ValueError when it is not one."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        version = data.get("schema_version", 0)
        if not isinstance(version, int) or not 0 <= version <= SCHEMA_VERSION:
            raise ValueError(f"schema_version {version!r}: this version reads 0 to {SCHEMA_VERSION}")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        record = cls(
            **{k: v for k, v in data.items() if k in known}, extra={k: v for k, v in data.items() if k not in known}
        )
        record.schema_version = SCHEMA_VERSION  # read into this version's fields: written back as such
        for name, kind in (("distinct", dict), ("config", dict), ("final", dict), ("best", dict), ("history", list),
                           ("resumes", list), ("wandb", dict), ("checkpoints", dict), ("outcomes", dict)):  # fmt: skip
            value = getattr(record, name)
            if value is None:
                setattr(record, name, kind())
            elif not isinstance(value, kind):
                raise ValueError(f"{name} is a {type(value).__name__}, not a {kind.__name__}")
        if not isinstance(record.status, str):
            raise ValueError(f"status {record.status!r} is not one of {', '.join(STATUSES)}")
        check_metric_values(record)
        return record

    def to_dict(self) -> dict:
        """The JSON object written to record.json (without `run_dir`, with `extra` at the top level)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("extra", "run_dir")}
        return {**self.extra, **data}

    def value_of(self, key: str):
        """A top-level field by name, known or `extra` (None when absent)."""
        if key == "extra" or key not in self.__dataclass_fields__:
            return self.extra.get(key)
        return getattr(self, key)


def check_metric_values(record: RunRecord) -> None:
    """Every value of `final`, `best` and each `history` row is a number (NaN included: a diverged run) or null;
    ValueError naming the first that is not (`"val/acc": "high"`), which compare would otherwise fail on."""
    tables = [("final", record.final), ("best", record.best)]
    tables += [(f"history[{i}]", row) for i, row in enumerate(record.history)]
    for where, table in tables:
        if not isinstance(table, dict):
            raise ValueError(f"{where} is {table!r}, not a dict")
        for key, value in table.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{where}[{key!r}] is {value!r}, not a number")


def write_atomic(path: Path, text: str) -> None:
    """Write `path` through a temporary file and `os.replace`: readers see the old or the new file, never
    half of one; on any failure (disk full) the temporary file is removed and the error raised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_record(path: Path, record: RunRecord) -> None:
    """Write a record atomically (readers see the old or the new file)."""
    write_atomic(Path(path), json.dumps(record.to_dict(), indent=1))


def read_record(path: Path, warn: bool | None = None) -> RunRecord | None:
    """The record in `path` (its `run_dir` set). A file that cannot be read, is not JSON or is not a record
    (another schema, a field of the wrong type) is one line naming the file: a ConfigError by default; with
    `warn` (polling a run that may not have written yet, scanning a folder), None, with a warning if True."""
    try:
        record = RunRecord.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        line = f"run record {path}: {str(error).splitlines()[0][:120] if str(error) else type(error).__name__}"
        if warn is None:
            raise ConfigError(line) from None
        if warn:
            print(f"warning: skipping unreadable {line}", file=sys.stderr)
        return None
    record.run_dir = str(Path(path).parent)
    return record


def load_records(root: Path) -> list[RunRecord]:
    """Every readable record under root (recursively), each with its `run_dir`; unreadable ones are skipped
    with a warning naming the file."""
    return [r for path in sorted(Path(root).rglob(RECORD_FILE)) if (r := read_record(path, warn=True)) is not None]


NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+,@-]*")


def check_name(option: str, name: str) -> None:
    """A run or study name becomes one directory under the output folder: no separators, no `..`, not
    hidden, and short enough for the file system."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"{option} {name!r}: a name is one folder under the output folder: letters, digits and _ . = + , @ -, "
            "not starting with '.' or '-', without '..' or '/'"
        )
    if len(name.encode()) > MAX_NAME_BYTES:
        raise ConfigError(
            f"{option}: {len(name.encode())} bytes is too long for a folder name; at most {MAX_NAME_BYTES}"
        )


RUN_PREFIX = "run:"


def find_checkpoint(reference: str, out_dir: str, fields: dict) -> str:
    """A checkpoint path as given, or for `run:NAME` the last.ckpt of the newest *finished* run named NAME
    anywhere under `out_dir` (plain runs and sweep trials alike). NAME may hold `{encoding}`-style fields,
    filled from `fields` (the model's arguments), so one sweep parameter points every fine-tuning trial at
    the pre-training run of its own encoding."""
    if not reference.startswith(RUN_PREFIX):
        return reference
    try:
        name = reference[len(RUN_PREFIX) :].format(**fields)
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(f"init_from {reference!r}: cannot fill {error} from the model's arguments") from None
    runs = [r for r in load_records(Path(out_dir)) if r.name == name and r.status == "finished"]
    runs = [r for r in runs if (Path(r.run_dir) / "checkpoints" / "last.ckpt").is_file()]
    encodings = sorted({str(r.encoding) for r in runs})
    if len(encodings) > 1:  # the same name for different models: refuse to guess
        found = ", ".join(f"{r.run_dir} ({r.encoding})" for r in runs[:6])
        raise ConfigError(
            f"init_from {reference!r}: {len(runs)} finished runs named {name!r} with different encodings "
            f"({', '.join(encodings)}): {found}; pass a checkpoint path or a name with {{encoding}}"
        )
    checkpoints = sorted((Path(r.run_dir) / "checkpoints" / "last.ckpt" for r in runs), key=lambda c: c.stat().st_mtime)
    if not checkpoints:
        raise ConfigError(
            f"init_from {reference!r}: no finished run named {name!r} with a last.ckpt under {out_dir}; "
            "run the pre-training first (sweeps/tupe_mlm.yaml) or pass a checkpoint path"
        )
    return str(checkpoints[-1])
