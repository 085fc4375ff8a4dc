"""A run's per-example evaluation outcomes on disk: `<run_dir>/outcomes/<stage>-step<k>.npz`, one compressed numpy
file per validation (and test), each a table of columns (lightning_modules/outcomes.py: `id`, `hash`, `correct`,
`tok_acc`, `nll`, `length`, ...; one row per example, sorted by id). The record points to the latest of each stage
(`RunRecord.outcomes`: {"val": {"path": "outcomes/val-step200.npz", "step": 200, "examples": 960,
"fingerprint": "..."}}); `compare --save_runs` carries the tables packed into the JSON (`pack` / `unpack`).

A file stores a float column as float16 when every value keeps 3 significant digits there (relative error
<= 1e-3; inf and nan as they are), as mean token NLLs and accuracies do, else as float32 (values below
float16's normal range or above its largest); read back as float32. About 14 bytes per example for a causal
LM's table (the 8-byte content digest is most of it), against 16 with float32 columns.

Read a run's table with `outcome_table(record, stage)`, whichever it came from (a run folder or a saved file).
`fingerprint` is a digest of the examples' ids and content digests: runs with the same fingerprint evaluated the
same examples, so their ids can be paired (pe_sweeps/compare/resampling.py).
"""

import base64
import hashlib
import io
from pathlib import Path

import numpy as np

from pe_sweeps.runs.records import RunRecord

FOLDER = "outcomes"
FLOAT16_RELATIVE_ERROR = 1e-3  # what a float column may lose in its file: 3 significant digits kept
PACKED_KINDS = {"b": "bits", "f": "float16", "i": "int", "u": "int"}


def file_name(stage: str, step: int) -> str:
    """`outcomes/val-step200.npz`: the run-folder-relative path of one evaluation's table."""
    return f"{FOLDER}/{stage}-step{step}.npz"


def fingerprint(table: dict[str, np.ndarray]) -> str | None:
    """16 hex digits identifying the evaluated examples (their ids and content digests); None without digests."""
    if "hash" not in table:
        return None
    digest = hashlib.sha1(np.ascontiguousarray(table["id"], dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(table["hash"], dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]


def write_table(run_dir: Path, stage: str, step: int, table: dict[str, np.ndarray]) -> dict:
    """Write one evaluation's table (atomically) and return the record's pointer to it."""
    relative = file_name(stage, step)
    path = Path(run_dir) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: stored(values) for name, values in table.items()})
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(path)
    return {"path": relative, "step": step, "examples": len(table["id"]), "fingerprint": fingerprint(table)}


def stored(values: np.ndarray) -> np.ndarray:
    """A column as its file keeps it: floats as float16 where every value keeps 3 significant digits there (inf
    and nan too), other floats as float32; other columns as they are."""
    if values.dtype.kind != "f":
        return values
    with np.errstate(over="ignore"):  # a value beyond float16's largest becomes inf: the column stays float32
        half = values.astype(np.float16)
    finite = np.isfinite(values)
    close = np.abs(half[finite].astype(np.float64) - values[finite]) <= FLOAT16_RELATIVE_ERROR * np.abs(values[finite])
    return half if close.all() else values.astype(np.float32)


def read_table(path: Path) -> dict[str, np.ndarray]:
    """The columns of an outcome file (floats as float32)."""
    with np.load(path) as data:
        return {name: data[name].astype(np.float32) if data[name].dtype == np.float16 else data[name]
                for name in data.files}  # fmt: skip


def pack(table: dict[str, np.ndarray]) -> dict:
    """A table as compact JSON: ids 0..N-1 as a count, booleans as packed bits, floats as float16, integers as
    the smallest integer type that holds them, each base64 (about 2 bytes per float value, 1/8 per bit)."""
    packed = {"examples": len(table["id"]), "columns": {}}
    for name, values in table.items():
        if name == "id" and np.array_equal(values, np.arange(len(values))):
            packed["columns"][name] = {"range": len(values)}
            continue
        kind = "bits" if values.dtype == bool else PACKED_KINDS.get(values.dtype.kind, "float16")
        if kind == "bits":
            raw = np.packbits(values)
        elif kind == "float16":
            raw = values.astype("<f2")
        else:
            raw = values.astype(smallest_int(values))
            kind = raw.dtype.str
        packed["columns"][name] = {"kind": kind, "data": base64.b64encode(raw.tobytes()).decode()}
    return packed


def smallest_int(values: np.ndarray) -> str:
    """The little-endian numpy integer type of fewest bytes holding every value."""
    low, high = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    for dtype in ("<i1", "<i2", "<i4"):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return "<i8"


def unpack(packed: dict) -> dict[str, np.ndarray]:
    """The table `pack` packed (floats come back as float32, integers as int64)."""
    count, table = packed["examples"], {}
    for name, column in packed["columns"].items():
        if "range" in column:
            table[name] = np.arange(column["range"], dtype=np.int64)
            continue
        raw = base64.b64decode(column["data"])
        if column["kind"] == "bits":
            table[name] = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=count).astype(bool)
        elif column["kind"] == "float16":
            table[name] = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            table[name] = np.frombuffer(raw, dtype=column["kind"]).astype(np.int64)
    return table


def outcome_table(record: RunRecord, stage: str = "val") -> dict[str, np.ndarray] | None:
    """A run's per-example outcomes of its latest `stage` evaluation: {column: array}, one row per example sorted
    by id; packed in the record (a `--save_runs` file) or read from its run folder; None when it has none (a run
    from before outcomes were kept, a stage never evaluated, a folder that moved)."""
    pointer = (record.outcomes or {}).get(stage)
    if not pointer:
        return None
    if "table" in pointer:
        return unpack(pointer["table"])
    if record.run_dir is None:
        return None
    path = Path(record.run_dir) / pointer["path"]
    return read_table(path) if path.is_file() else None
