"""Local run records: one `record.json` per run that `cli.py compare` reads (and W&B mirrors).

A record holds the resolved config, identity (task, encoding, seed, sweep), what `devices: auto` resolved to
(world size, devices, nodes, precision, the global batch), status
(running / finished / failed / diverged / interrupted), the final and best value of every metric,
and the history of validation metrics. It is rewritten atomically at every validation, so a run
killed mid-way still leaves what it had measured. A fit resumed from one of the run's checkpoints continues
the same record (its history cut back to the checkpoint's step; `resumes` says when) and W&B run.
"""

import json
import os
import re
import sys
import time
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


class RunRecord(Callback):
    """Write and keep up to date `<run_dir>/record.json` (rank 0 only). `previous`: the record of the run
    this fit resumes (from one of its checkpoints), continued rather than replaced."""

    def __init__(self, run_dir: Path, identity: dict, config: dict, previous: dict | None = None):
        self.path = Path(run_dir) / RECORD_FILE
        kept = {k: previous[k] for k in ("final", "best", "history", "wandb") if k in (previous or {})}
        self.record = {
            **identity,
            "status": "running",
            "config": config,
            "final": {},
            "best": {},
            "history": [],
            **kept,
        }
        self.resumed = previous is not None
        if self.resumed:
            resume = {"at": time.time(), "previous_status": previous.get("status")}
            self.record["resumes"] = [*previous.get("resumes", []), resume]

    def write(self) -> None:
        self.record["updated_at"] = time.time()
        write_atomic(self.path, json.dumps(self.record, indent=1))

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self.record["started_at"] = time.time()
            scale = run_scale(trainer)  # part of what defines a result, whatever `devices: auto` resolved to
            self.record.update(scale)
            if line := scale_line(trainer, scale):
                print(line, flush=True)
            self.record["matmul_precision"] = torch.get_float32_matmul_precision()  # "high": TF32 on CUDA
            self.write()
            where = describe_run(trainer, self.record)
            if where:  # the W&B run (id, path, offline folder), for the sweep's trial attributes and `wandb sync`
                folders = (self.record.get("wandb") or {}).get("dirs") or []  # a resumed run's earlier ones
                if where.get("dir") and where["dir"] not in folders:
                    folders = [*folders, where["dir"]]
                self.record["wandb"] = {**where, "dirs": folders}
                self.write()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module, batch, batch_idx: int) -> None:
        if "first_step" not in self.record and trainer.is_global_zero:
            self.record["first_step"] = trainer.global_step + 1  # > 1 when resumed from a checkpoint
            self.record["first_step_at"] = time.time()  # the live view's ETA counts from here
            if self.resumed:  # validations after the checkpoint are done again: theirs are dropped
                self.cut_history(trainer.global_step)
        if "startup_seconds" not in self.record and trainer.is_global_zero and "process_start" in self.record:
            self.record["startup_seconds"] = time.time() - self.record["process_start"]  # process start -> step 1

    def cut_history(self, step: int) -> None:
        """A resumed run's history up to its checkpoint's `step`, and the best values of its metrics again."""
        history = [row for row in self.record["history"] if row.get("step", 0) <= step]
        self.record["history"] = history
        self.record["resumes"][-1]["step"] = step
        for key in {k for row in history for k in row} - {"step", "wandb_step"}:
            values = [row[key] for row in history if key in row]
            self.record["best"][key] = (max if goal(key) == "max" else min)(values)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module, checkpoint: dict) -> None:
        """The run folder, in every checkpoint: a fit resumed from one outside it (Lightning's SLURM requeue
        checkpoint in --trainer.default_root_dir) continues this run."""
        checkpoint["pe_run_dir"] = str(self.path.parent.resolve())

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        """Progress for the sweep's live view: the step and max_steps, written every PROGRESS_EVERY_S."""
        if not trainer.is_global_zero:
            return
        self.record["step"], self.record["max_steps"] = trainer.global_step, trainer.max_steps
        if time.time() - self.record.get("updated_at", 0) >= PROGRESS_EVERY_S:
            self.write()

    def _update(self, trainer: pl.Trainer) -> None:
        metrics = _scalars(trainer.callback_metrics)
        self.record["final"].update(metrics)
        for key, value in metrics.items():
            best = self.record["best"].get(key)
            better = max if goal(key) == "max" else min
            self.record["best"][key] = value if best is None else better(best, value)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        self._update(trainer)
        if trainer.state.fn == "validate":  # `cli.py validate`: the run is this evaluation
            self.record["status"] = "finished"
        evals = {k: v for k, v in _scalars(trainer.callback_metrics).items() if k.startswith("val/")}
        self.record["history"].append({"step": trainer.global_step, "wandb_step": logged_step(trainer), **evals})
        self.write()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._update(trainer)
            self.record["status"] = "interrupted" if trainer.interrupted else "finished"
            self.record["global_step"] = trainer.global_step
            # resumed from its last checkpoint, with no step left to train: it would have started here
            self.record.setdefault("first_step", trainer.global_step + 1)
            self.record.setdefault("first_step_at", time.time())
            self.write()
            log_by_length(trainer, self.record)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._update(trainer)
            if trainer.state.fn != "fit":  # `cli.py test`: the run is this evaluation
                self.record["status"] = "finished"
            self.write()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if trainer.is_global_zero:
            self.record["status"] = status_of(exception)
            self.record["error"] = f"{type(exception).__name__}: {exception}"
            self.record["global_step"] = trainer.global_step
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


def read_record(path: Path, warn: bool = True) -> dict | None:
    """One record, or None (with a warning naming the file) when it is unreadable or not a record."""
    try:
        record = json.loads(Path(path).read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        return record
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        if warn:
            print(
                f"warning: skipping unreadable run record {path}: {str(error).splitlines()[0][:120]}", file=sys.stderr
            )
        return None


def load_records(root: Path) -> list[dict]:
    """Every readable record under root (recursively), each with its `run_dir`; unreadable ones are skipped
    with a warning naming the file."""
    records = []
    for path in sorted(Path(root).rglob(RECORD_FILE)):
        record = read_record(path)
        if record is not None:
            record["run_dir"] = str(path.parent)
            records.append(record)
    return records


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
    runs = [r for r in load_records(Path(out_dir)) if r.get("name") == name and r.get("status") == "finished"]
    runs = [r for r in runs if (Path(r["run_dir"]) / "checkpoints" / "last.ckpt").is_file()]
    encodings = sorted({str(r.get("encoding")) for r in runs})
    if len(encodings) > 1:  # the same name for different models: refuse to guess
        found = ", ".join(f"{r['run_dir']} ({r.get('encoding')})" for r in runs[:6])
        raise ConfigError(
            f"init_from {reference!r}: {len(runs)} finished runs named {name!r} with different encodings "
            f"({', '.join(encodings)}): {found}; pass a checkpoint path or a name with {{encoding}}"
        )
    checkpoints = sorted(
        (Path(r["run_dir"]) / "checkpoints" / "last.ckpt" for r in runs), key=lambda c: c.stat().st_mtime
    )
    if not checkpoints:
        raise ConfigError(
            f"init_from {reference!r}: no finished run named {name!r} with a last.ckpt under {out_dir}; "
            "run the pre-training first (sweeps/tupe_mlm.yaml) or pass a checkpoint path"
        )
    return str(checkpoints[-1])
