"""The part every task module shares: evaluation hooks, the optimizer and the encoding accessor."""

import pytorch_lightning as pl

from lightning_modules.optim import adamw_with_schedule


class TaskModule(pl.LightningModule):
    """Base of the task modules (synthetic tasks, causal LM, masked LM, classification, translation).

    Validation and test route to two methods a task defines, `_eval_step(batch, stage)` and
    `_eval_epoch_end(stage)` (stage "val" or "test"), which accumulate in torchmetrics and log once per
    epoch. The optimizer is AdamW with linear warm-up then the `lr_decay` schedule, read from the
    hyper-parameters `lr`, `weight_decay`, `warmup_steps` and `lr_decay` (see lightning_modules/optim.py);
    `warmup(total_steps)` may be overridden (the classifier's warm-up ratio).
    """

    @property
    def encoding(self):
        return self.transformer.encoding

    def _eval_step(self, batch: dict, stage: str) -> None:
        raise NotImplementedError

    def _eval_epoch_end(self, stage: str):
        raise NotImplementedError

    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def warmup(self, total_steps: float) -> int:
        return self.hparams.warmup_steps

    def configure_optimizers(self):
        hp, total = self.hparams, self.trainer.estimated_stepping_batches
        return adamw_with_schedule(self, hp.lr, hp.weight_decay, self.warmup(total), hp.lr_decay, total)
