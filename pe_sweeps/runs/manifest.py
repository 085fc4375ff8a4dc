"""The sweep manifest: `<out_dir>/sweeps/<study>/manifest.json`, written beside the study's trials when a sweep
creates or resumes its study, so that `cli.py compare --sweep NAME` reads the sweep's metrics, goals and
parameters from the output folder alone, whatever storage holds the study (SQLite, journal file, Redis,
PostgreSQL). It names the storage's kind only, never its URL (which may hold a password).

    {"schema_version": 1, "study": "quickstart", "name": "quickstart", "method": "grid",
     "sweep_file": "/abs/sweeps/quickstart.yaml", "fingerprint": "<16 hex digits>", "storage": "sqlite",
     "metrics": [{"name": "val/acc", "goal": "maximize"}],
     "parameters": {"model.arch.encoding": {"values": [...]}, ...},   # as in the sweep file
     "roles": {"model.arch.encoding": "encoding", "data.task": "task", "seed_everything": "seed", ...},
     "compare_rows": null}                                             # a reseed study's rows
"""

import hashlib
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

from pe_core.errors import ConfigError
from pe_sweeps.layout import study_dir
from pe_sweeps.runs.records import write_atomic

MANIFEST_FILE = "manifest.json"
SCHEMA_VERSION = 1
SEED_KEYS = ("seed_everything",)
TASK_KEYS = ("data.task", "data.init_args.task")


def manifest_path(out_dir: str | Path, study: str) -> Path:
    return study_dir(out_dir, study) / MANIFEST_FILE


def fingerprint(sweep: dict) -> str:
    """The sweep's digest: the study's `sweep_digest` attribute (sweep/study_protocol.py refuses a resume
    with another file) and the manifest's `fingerprint`. Changing it makes every existing study refuse to resume."""
    return hashlib.sha256(json.dumps(sweep, sort_keys=True).encode()).hexdigest()[:16]


def storage_kind(url: str) -> str:
    """sqlite, journal, redis, postgresql, mysql...: the URL's scheme without its driver, never the URL."""
    if "://" not in url:
        return "journal"  # a --storage file path (storages/journal_storage.py)
    return urlsplit(url).scheme.split("+")[0]


def roles(parameters: dict) -> dict[str, str]:
    """Each parameter's part in a comparison: `seed` and `task` (columns), `encoding` (shown together as the
    run's `encoding`, whichever task module declares it) or `setting` (a row key when varied)."""
    from lightning_modules.registry import encoding_parameters

    named = {**dict.fromkeys(encoding_parameters(), "encoding"), **dict.fromkeys(TASK_KEYS, "task"),
             **dict.fromkeys(SEED_KEYS, "seed")}  # fmt: skip
    return {key: named.get(key, "setting") for key in parameters}


def describe(sweep: dict) -> dict:
    """What compare needs of a sweep dict (a loaded sweep file, or an Optuna study's `sweep` attribute)."""
    metrics = sweep.get("metrics") or ([sweep["metric"]] if sweep.get("metric") else [])
    parameters = dict(sweep.get("parameters") or {})
    return {"name": sweep.get("name"), "method": sweep.get("method"), "metrics": metrics,
            "parameters": parameters, "roles": roles(parameters), "compare": sweep.get("compare")}  # fmt: skip


def write_manifest(out_dir: str | Path, study: str, sweep: dict, sweep_file: str | Path, url: str) -> None:
    """Write (or rewrite, on a resume) the study's manifest. A manifest of the same sweep keeps what was added
    to it later (a reseed study's `compare_rows`). An unwritable folder is a warning: compare then falls back
    to the Optuna database."""
    path = manifest_path(out_dir, study)
    digest = fingerprint(sweep)
    earlier = read_manifest(out_dir, study, warn=False)
    kept = earlier.get("compare_rows") if earlier and earlier.get("fingerprint") == digest else None
    manifest = {"schema_version": SCHEMA_VERSION, "study": study, **describe(sweep),
                "sweep_file": str(Path(sweep_file).resolve()), "fingerprint": digest,
                "storage": storage_kind(url), "compare_rows": kept}  # fmt: skip
    try:
        write_atomic(path, json.dumps(manifest, indent=1, default=str))
    except OSError as error:
        print(f"warning: cannot write the sweep manifest {path}: {error}", file=sys.stderr)


def set_compare_rows(out_dir: str | Path, study: str, rows: str) -> None:
    """A reseed study's comparison rows (sweep/reseed.py), added to its manifest."""
    manifest = read_manifest(out_dir, study)
    if manifest is not None:
        write_atomic(manifest_path(out_dir, study), json.dumps({**manifest, "compare_rows": rows}, indent=1))


def read_manifest(out_dir: str | Path, study: str, warn: bool = True) -> dict | None:
    """The study's manifest, None when it has none (a sweep made before manifests); a manifest that is not
    JSON, not an object or of a newer schema is one line naming the file (with `warn=False`: None)."""
    path = manifest_path(out_dir, study)
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        if not isinstance(manifest, dict) or not isinstance(manifest.get("parameters", {}), dict):
            raise ValueError("not a sweep manifest")
        version = manifest.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(f"schema_version {version!r}, this version reads 1 to {SCHEMA_VERSION}")
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        if not warn:
            return None
        raise ConfigError(f"sweep manifest {path}: {str(error).splitlines()[0][:120]}") from None
    return manifest
