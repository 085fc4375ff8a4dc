"""LastCheckpoint: the one checkpoint a fit keeps, `<run>/checkpoints/last.ckpt`, the state of the run at its
newest validation and at the end of training."""

import warnings
from collections.abc import Callable
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from pe_sweeps import internals

NOT_EMPTY = r"Checkpoint directory .* exists and is not empty"  # Lightning's warning at setup


class LastCheckpoint(ModelCheckpoint):
    """`<dirpath>/last.ckpt`, rewritten at each validation (ModelCheckpoint's own schedule) and at the end of
    training (the step reaching max_steps, or the fit's end), so it always holds the final weights:
    ModelCheckpoint alone saves at validations only, which threw away the steps after the last one and saved
    nothing in a fit shorter than one validation interval. `on_saved(trainer, path)` hears of every save (the
    run record's `checkpoints`). `resuming`: the folder is this run's own, resumed from its checkpoint, so
    Lightning's "exists and is not empty" warning is not shown."""

    def __init__(self, dirpath: Path, on_saved: Callable[[pl.Trainer, str], None] | None = None,
                 resuming: bool = False):  # fmt: skip
        super().__init__(dirpath=dirpath, filename="last", enable_version_counter=False)
        self.on_saved, self.resuming = on_saved, resuming

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        with warnings.catch_warnings():
            if self.resuming:
                warnings.filterwarnings("ignore", message=NOT_EMPTY)
            super().setup(trainer, pl_module, stage)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:  # fmt: skip
        """The step that reaches max_steps is saved as it ends, mid-epoch as Lightning sees it: a fit resumed from
        it with more steps continues that epoch's data (saved at `on_train_end`, Lightning would count the epoch
        as finished and start the next one)."""
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if 0 < trainer.max_steps <= trainer.global_step:
            internals.save_checkpoint_now(self, trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A fit stopped otherwise (max_epochs, max_time, early stopping) saves its final step here, unless a
        validation or `on_train_batch_end` already did (or the fit is not saving: fast_dev_run)."""
        super().on_train_end(trainer, pl_module)
        internals.save_checkpoint_now(self, trainer)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:  # Lightning's hook (internals.py)
        super()._save_checkpoint(trainer, filepath)
        if self.on_saved is not None:
            self.on_saved(trainer, str(Path(filepath).resolve()))
