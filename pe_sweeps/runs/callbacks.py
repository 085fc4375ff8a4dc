"""Lightning callbacks every fit gets: the learning rate logged as `train/lr`, a progress bar that counts
steps (our runs are bounded by steps, not epochs), and a model summary that states the model's FLOPs."""

import logging

from pytorch_lightning.callbacks import Callback, ModelSummary, RichProgressBar
from pytorch_lightning.utilities.model_summary import get_human_readable_count
from torch import nn

from lightning_modules.metric_names import TRAIN_LOSS
from pe_sweeps import internals


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
    "Epoch 0/-2" (our runs are bounded by steps; max_epochs is -1). It renders at most `refresh_rate` times a
    second (10, Rich's own default, not Lightning's 100: its rendering thread, holding the GIL, then drew a tiny
    model's every step, a few percent of the step's time)."""

    def __init__(self, refresh_rate: int = 10, **kwargs):
        super().__init__(refresh_rate=refresh_rate, **kwargs)

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


class ModelSummaryWithFlops(ModelSummary):
    """Lightning's model summary, whose last row "Total Flops" reads 0 unless a module sets `example_input_array`
    (ours take batches, not one tensor): that row states instead the training FLOPs per token, PaLM's count
    6 N + 12 A T C (Chowdhery et al. 2022, appendix B: N parameters without the token embeddings, A attention
    layers, T the training sequence length, C the width; extra position terms are not in it)."""

    def on_fit_start(self, trainer, pl_module) -> None:
        self.per_token = training_flops_per_token(pl_module, getattr(trainer, "datamodule", None))
        super().on_fit_start(trainer, pl_module)

    def summarize(self, summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                  total_flops, **kwargs) -> None:  # fmt: skip
        table = internals.format_model_summary(
            total_parameters, trainable_parameters, model_size, total_training_modes, total_flops, *summary_data
        )
        lines = table.splitlines()
        if not total_flops and self.per_token and lines[-1].endswith("Total Flops"):
            lines[-1] = f"{get_human_readable_count(self.per_token):<10}Training FLOPs per token (6N + 12ATC, PaLM)"
        logging.getLogger(ModelSummary.__module__).info("\n" + "\n".join(lines))


def training_flops_per_token(module: nn.Module, datamodule) -> int | None:
    """6 N + 12 A T C for a task module with an `arch` (None otherwise)."""
    arch = getattr(module, "arch", None)
    if arch is None:
        return None
    from lightning_modules.transformer import Attention

    embeddings = {
        id(m.weight) for m in module.modules() if isinstance(m, nn.Embedding) and m.num_embeddings == arch.vocab_size
    }
    n = sum(p.numel() for p in module.parameters() if id(p) not in embeddings)
    attention = sum(isinstance(m, Attention) or type(m).__name__ == "CrossAttention" for m in module.modules())
    length = getattr(datamodule, "train_seq_len", None) or arch.max_length
    return 6 * n + 12 * attention * length * arch.dim
