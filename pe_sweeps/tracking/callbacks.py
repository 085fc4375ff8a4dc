"""Lightning callbacks every fit gets: the learning rate logged as `train/lr`, and a progress bar that counts
steps (our runs are bounded by steps, not epochs)."""

from pytorch_lightning.callbacks import Callback, RichProgressBar

from lightning_modules.metric_names import TRAIN_LOSS


class LogLearningRate(Callback):
    """`train/lr`: the first parameter group's learning rate at every logged step (the schedule is ours)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        # only on the steps Lightning writes to its loggers: a float logged is copied to the device, a sync on CUDA
        if trainer.optimizers and logs_this_step(trainer):
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            pl_module.log("train/lr", float(lr), on_step=True, on_epoch=False, batch_size=1)


def logs_this_step(trainer) -> bool:
    """Whether Lightning writes this training step's logged values to its loggers (`log_every_n_steps`)."""
    connector = getattr(trainer, "_logger_connector", None)  # as Lightning's LearningRateMonitor reads it
    return connector is None or connector.should_update_logs


class StepProgressBar(RichProgressBar):
    """Lightning's rich progress bar with the global step out of max_steps ("step 120/3000") instead of
    "Epoch 0/-2" (our runs are bounded by steps; max_epochs is -1)."""

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{f'Epoch {current_epoch}':{len(self.validation_description)}}"

    shown: dict | None = None  # the metrics last read

    def get_metrics(self, trainer, pl_module) -> dict:
        """Also train/loss, which the task modules log without `prog_bar` (Lightning converts those to numbers,
        a device sync, every step): while training it is read here every `log_every_n_steps` steps only."""
        every = getattr(trainer, "log_every_n_steps", 1) or 50
        if self.shown is None or not getattr(trainer, "training", False) or trainer.global_step % every == 0:
            self.shown = super().get_metrics(trainer, pl_module)
            loss = getattr(trainer, "callback_metrics", {}).get(TRAIN_LOSS)
            if loss is not None:
                self.shown[TRAIN_LOSS] = float(loss)
        metrics, total = self.shown, trainer.max_steps
        return {"step": f"{trainer.global_step}/{total}" if total and total > 0 else trainer.global_step, **metrics}
