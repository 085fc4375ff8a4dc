"""RecordWriter: the Lightning callback that keeps a run's `record.json` (a RunRecord, records.py) up to date
during a fit, and the run's scale (world size, devices, precision, global batch)."""

import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from lightning_modules.metric_names import goal
from pe_core.errors import DivergedError
from pe_sweeps.failpoints import failpoint
from pe_sweeps.layout import RECORD_FILE
from pe_sweeps.runs.length_tables import log_by_length
from pe_sweeps.runs.outcomes import write_table
from pe_sweeps.runs.records import RunRecord, write_record
from pe_sweeps.runs.wandb_setup import describe_run

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


class RecordWriter(Callback):
    """Write and keep up to date `<run_dir>/record.json` (rank 0 only), a RunRecord. `previous`: the record of
    the run this fit resumes (from one of its checkpoints), continued rather than replaced."""

    def __init__(self, run_dir: Path, identity: dict, config: dict, previous: RunRecord | None = None):
        self.path = Path(run_dir) / RECORD_FILE
        self.record = RunRecord.from_dict({**identity, "status": "running", "config": config})
        self.resumed = previous is not None
        self.checkpointed = False
        if self.resumed:
            record = self.record
            record.final, record.best, record.history = previous.final, previous.best, previous.history
            record.wandb, record.outcomes = previous.wandb, previous.outcomes
            record.resumes = [*previous.resumes, {"at": time.time(), "previous_status": previous.status}]
            record.checkpoints = previous.checkpoints

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
        if self.checkpointed:  # once per checkpoint, not every step
            self.checkpointed = False
            failpoint("step:after_checkpoint")  # a run with a readable checkpoint, mid-training (tests)
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
        self.checkpointed = True

    def checkpoint_saved(self, trainer: pl.Trainer, path: str) -> None:
        """A checkpoint was written (LastCheckpoint, checkpointing.py): the record names it by its file's stem
        ("last") with the step it holds."""
        if trainer.is_global_zero:
            self.record.checkpoints[Path(path).stem] = {"path": path, "step": trainer.global_step}
            self.write()

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

    def save_outcomes(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """The evaluation's per-example outcomes (the task module's `evaluation_outcomes`), written to
        `outcomes/<stage>-step<k>.npz` and pointed to by the record (runs/outcomes.py)."""
        table = getattr(pl_module, "evaluation_outcomes", {}).get(stage)
        if table:
            self.record.outcomes[stage] = write_table(self.path.parent, stage, trainer.global_step, table)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        self._update(trainer)
        self.save_outcomes(trainer, pl_module, "val")
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
            self.save_outcomes(trainer, pl_module, "test")
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
