"""Local run records: one `record.json` per run that `cli.py compare` reads (and W&B mirrors).

A record holds the resolved config, identity (task, encoding, seed, sweep), what `devices: auto` resolved to
(world size, devices, nodes, precision, the global batch), status
(running / finished / failed / diverged / interrupted), the final and best value of every metric,
and the history of validation metrics. It is rewritten atomically at every validation, so a run
killed mid-way still leaves what it had measured. A fit resumed from one of the run's checkpoints continues
the same record (its history cut back to the checkpoint's step; `resumes` says when) and W&B run.

The record is a RunRecord (a dataclass with a `schema_version`), written by RecordWriter through
`write_record` and read through `read_record` / `load_records`: this module is the only one that knows
its JSON. Records written before the schema was versioned (version 0) read with the same fields.
"""

import dataclasses
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from lightning_modules.metrics import goal
from pe_sweeps.errors import ConfigError, DivergedError
from pe_sweeps.layout import MAX_NAME_BYTES, RECORD_FILE
from pe_sweeps.tracking.length_tables import log_by_length
from pe_sweeps.tracking.wandb_setup import describe_run

PROGRESS_EVERY_S = 5.0  # training progress (`step`) reaches the record at most this often between validations
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
                           ("resumes", list), ("wandb", dict)):  # fmt: skip
            value = getattr(record, name)
            if value is None:
                setattr(record, name, kind())
            elif not isinstance(value, kind):
                raise ValueError(f"{name} is a {type(value).__name__}, not a {kind.__name__}")
        if not isinstance(record.status, str):
            raise ValueError(f"status {record.status!r} is not one of {', '.join(STATUSES)}")
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


def _scalars(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def run_scale(trainer: pl.Trainer) -> dict:
    """What `devices: auto` resolved to, part of what defines a result (compare's SETUP): world size,
    devices per node, nodes, precision and the global batch (per-device batch x world size x accumulation)."""
    scale = {"world_size": trainer.world_size, "num_devices": trainer.num_devices, "num_nodes": trainer.num_nodes,
             "precision": str(trainer.precision)}  # fmt: skip
    per_device = getattr(trainer.datamodule, "batch_size", None)
    if isinstance(per_device, int):
        scale["global_batch_size"] = per_device * trainer.world_size * trainer.accumulate_grad_batches
    return scale


def scale_line(trainer: pl.Trainer, scale: dict) -> str | None:
    """One line for a fit spread over several processes: "DDP over 8 GPUs: global batch 256 = 32 x 8"."""
    world = scale["world_size"]
    if world <= 1:
        return None
    strategy = type(trainer.strategy).__name__.removesuffix("Strategy")
    accelerator = type(trainer.accelerator).__name__.removesuffix("Accelerator")
    devices = "GPUs" if accelerator == "CUDA" else f"{accelerator} processes"
    line = f"{strategy} over {world} {devices}"
    if "global_batch_size" in scale:
        per_device = scale["global_batch_size"] // (world * trainer.accumulate_grad_batches)
        line += f": global batch {scale['global_batch_size']} = {per_device} x {world}"
        if trainer.accumulate_grad_batches > 1:
            line += f" x {trainer.accumulate_grad_batches} (accumulate_grad_batches)"
    return line


class RecordWriter(Callback):
    """Write and keep up to date `<run_dir>/record.json` (rank 0 only), a RunRecord. `previous`: the record of
    the run this fit resumes (from one of its checkpoints), continued rather than replaced."""

    def __init__(self, run_dir: Path, identity: dict, config: dict, previous: RunRecord | None = None):
        self.path = Path(run_dir) / RECORD_FILE
        self.record = RunRecord.from_dict({**identity, "status": "running", "config": config})
        self.resumed = previous is not None
        if self.resumed:
            record = self.record
            record.final, record.best, record.history = previous.final, previous.best, previous.history
            record.wandb = previous.wandb
            record.resumes = [*previous.resumes, {"at": time.time(), "previous_status": previous.status}]

    def write(self) -> None:
        self.record.updated_at = time.time()
        write_record(self.path, self.record)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self.record.started_at = time.time()
            scale = run_scale(trainer)  # part of what defines a result, whatever `devices: auto` resolved to
            for key, value in scale.items():
                setattr(self.record, key, value)
            if line := scale_line(trainer, scale):
                print(line, flush=True)
            self.record.matmul_precision = torch.get_float32_matmul_precision()  # "high": TF32 on CUDA
            self.write()
            where = describe_run(trainer, self.record)
            if where:  # the W&B run (id, path, offline folder), for the sweep's trial attributes and `wandb sync`
                folders = self.record.wandb.get("dirs") or []  # a resumed run's earlier ones
                if where.get("dir") and where["dir"] not in folders:
                    folders = [*folders, where["dir"]]
                self.record.wandb = {**where, "dirs": folders}
                self.write()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module, batch, batch_idx: int) -> None:
        record = self.record
        if record.first_step is None and trainer.is_global_zero:
            record.first_step = trainer.global_step + 1  # > 1 when resumed from a checkpoint
            record.first_step_at = time.time()  # the live view's ETA counts from here
            if self.resumed:  # validations after the checkpoint are done again: theirs are dropped
                self.cut_history(trainer.global_step)
        if record.startup_seconds is None and trainer.is_global_zero and record.process_start is not None:
            record.startup_seconds = time.time() - record.process_start  # process start -> step 1

    def cut_history(self, step: int) -> None:
        """A resumed run's history up to its checkpoint's `step`, and the best values of its metrics again."""
        history = [row for row in self.record.history if row.get("step", 0) <= step]
        self.record.history = history
        self.record.resumes[-1]["step"] = step
        for key in {k for row in history for k in row} - {"step", "wandb_step"}:
            values = [row[key] for row in history if key in row]
            self.record.best[key] = (max if goal(key) == "max" else min)(values)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module, checkpoint: dict) -> None:
        """The run folder, in every checkpoint: a fit resumed from one outside it (Lightning's SLURM requeue
        checkpoint in --trainer.default_root_dir) continues this run."""
        checkpoint["pe_run_dir"] = str(self.path.parent.resolve())

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        """Progress for the sweep's live view: the step and max_steps, written every PROGRESS_EVERY_S."""
        if not trainer.is_global_zero:
            return
        self.record.step, self.record.max_steps = trainer.global_step, trainer.max_steps
        if time.time() - (self.record.updated_at or 0) >= PROGRESS_EVERY_S:
            self.write()

    def _update(self, trainer: pl.Trainer) -> None:
        metrics = _scalars(trainer.callback_metrics)
        self.record.final.update(metrics)
        for key, value in metrics.items():
            best = self.record.best.get(key)
            better = max if goal(key) == "max" else min
            self.record.best[key] = value if best is None else better(best, value)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        self._update(trainer)
        if trainer.state.fn == "validate":  # `cli.py validate`: the run is this evaluation
            self.record.status = "finished"
        evals = {k: v for k, v in _scalars(trainer.callback_metrics).items() if k.startswith("val/")}
        self.record.history.append({"step": trainer.global_step, "wandb_step": logged_step(trainer), **evals})
        self.write()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._update(trainer)
            record = self.record
            record.status = "interrupted" if trainer.interrupted else "finished"
            record.global_step = trainer.global_step
            # resumed from its last checkpoint, with no step left to train: it would have started here
            if record.first_step is None:
                record.first_step, record.first_step_at = trainer.global_step + 1, time.time()
            self.write()
            log_by_length(trainer, record)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._update(trainer)
            if trainer.state.fn != "fit":  # `cli.py test`: the run is this evaluation
                self.record.status = "finished"
            self.write()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if trainer.is_global_zero:
            self.record.status = status_of(exception)
            self.record.error = f"{type(exception).__name__}: {exception}"
            self.record.global_step = trainer.global_step
            try:
                self.write()
            except OSError as error:  # e.g. the disk that made the run fail is still full
                print(f"warning: cannot update {self.path}: {error}", file=sys.stderr)


def logged_step(trainer: pl.Trainer) -> int:
    """The `trainer/global_step` Lightning's loggers put on this validation's metrics: the batches stepped
    before it (Lightning validates before counting the batch, so one less than `global_step` mid-fit)."""
    return int(getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step))


def status_of(exception: BaseException) -> str:
    """ "diverged" for a non-finite loss, "interrupted" for Ctrl-C / SIGTERM, else "failed"."""
    if isinstance(exception, DivergedError):
        return "diverged"
    if isinstance(exception, KeyboardInterrupt) or type(exception).__name__ == "SIGTERMException":
        return "interrupted"
    return "failed"


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
