"""The part every task module shares: its architecture, its declared encodings, evaluation hooks, the optimizer."""

import inspect

import pytorch_lightning as pl
import torch
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import SequentialSampler

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import PositionalEncoding
from lightning_modules.optim import DivergenceWatch, adamw_with_schedule
from lightning_modules.registry import ONE_ENCODING, dotted_get  # noqa: F401 (dotted_get re-exported)
from lightning_modules.schedule_label import encoding_label
from pe_core.help_text import document_options
from pe_core.ranges import check_ranges

# What --help says of the options most task modules share (`options_help`); a module's own are added there.
COMMON_OPTIONS = {
    "arch": "encoding and sizes of the Transformer (vocab_size and max_length are linked from the data)",
    "causal": "decoder-only causal model (true) or bidirectional encoder (false); linked to the data",
    "lr": "peak learning rate of AdamW",
    "weight_decay": "AdamW weight decay",
    "warmup_steps": "linear warm-up steps from 0 to lr",
    "lr_decay": "after warm-up: constant, linear (to 0) or cosine (to 0)",
    "compile": "torch.compile the Transformer's blocks (opt-in; lightning_modules/compiling.py)",
}


def options_help(**own: str):
    """Class decorator: an `Args:` section on `__init__` describing each of its options (COMMON_OPTIONS and
    `own`), which jsonargparse shows in `--help`; an option left undescribed is an error at import."""
    return document_options(COMMON_OPTIONS, own)


class TaskModule(pl.LightningModule):
    """Base of the task modules (synthetic tasks, causal LM, masked LM, classification, translation).

    Validation and test route to two methods a task defines, `_eval_step(batch, stage)` and
    `_eval_epoch_end(stage)` (stage "val" or "test"), which accumulate in torchmetrics and log once per
    epoch. The optimizer is AdamW with linear warm-up then the `lr_decay` schedule, read from the
    hyper-parameters `lr`, `weight_decay`, `warmup_steps` and `lr_decay` (see lightning_modules/optim.py);
    `warmup(total_steps)` may be overridden (the classifier's warm-up ratio). A training step passes its loss
    to `watch_loss`, which keeps the first non-finite one on the device: a diverged run stops with one line
    at the next check (every `log_every_n_steps` steps, before a validation, at the end of training), with no
    host sync in the other steps.

    Encodings are declared, not guessed: `ENCODING_ARGS` names, per role, the init argument holding an
    encoding and the one holding its options (dotted paths into the arguments). The CLI checks them before
    anything is built, runs are named and grouped by `run_encoding` (the roles' encodings joined by "+"),
    and compare and reseed treat exactly these parameters as the encoding (`encoding_parameters` in
    lightning_modules/registry.py).
    """

    ENCODING_ARGS: dict[str, tuple[str, str]] = ONE_ENCODING  # declared in lightning_modules/registry.py

    @classmethod
    def declared_encodings(cls, init_args) -> dict[str, tuple[str, dict]]:
        """{argument path: (encoding name, options)} read from init arguments (parsed, or saved hparams)."""
        return {
            name: (dotted_get(init_args, name), dict(dotted_get(init_args, options) or {}))
            for name, options in cls.ENCODING_ARGS.values()
        }

    @classmethod
    def encoding_of(cls, init_args) -> str:
        """A run's encoding as its name and comparison group show it, e.g. "rope", "learned+rope", or "rope3.none"
        for a per-layer schedule of `arch` (`schedule_label.encoding_label`)."""
        arch = dotted_get(init_args, "arch")
        return "+".join(
            encoding_label(name, arch if path.startswith("arch.") else None)
            for path, (name, _) in cls.declared_encodings(init_args).items()
        )

    @property
    def run_encoding(self) -> str:
        return self.encoding_of(self.hparams)

    def save_arch_hyperparameters(self, arch: ArchConfig | dict) -> ArchConfig:
        """`save_hyperparameters()` of the calling `__init__` (its values checked against the ranges its
        signature declares), with `arch` kept as a plain dict (a checkpoint
        then loads with `weights_only=True`); returns it as an ArchConfig."""
        arch = ArchConfig.of(arch)
        self.save_hyperparameters(ignore=["arch"], frame=inspect.currentframe().f_back)
        check_ranges(type(self).__init__, self.hparams)  # the ranges its signature declares, when built directly
        # saved again as one dict: `hparams_initial` (what checkpoints and loggers record) gets `arch` too
        self.save_hyperparameters(dict(self.hparams) | {"arch": arch.as_dict()})
        return arch

    @property
    def attached_trainer(self) -> pl.Trainer | None:
        """The Trainer this module is attached to, or None (Lightning's public `trainer` raises when there is
        none: a module whose steps a test calls directly)."""
        try:
            return self.trainer
        except RuntimeError:
            return None

    @property
    def attached_datamodule(self):
        """The datamodule of the Trainer this module is attached to, or None."""
        return getattr(self.attached_trainer, "datamodule", None)

    @property
    def encoding(self):
        return self.transformer.encoding

    def setup(self, stage: str) -> None:
        """Before fitting on data whose training length is known (the datamodule's `train_seq_len`), warn in
        one line about encoding parameters that length never trains (T5's buckets past it)."""
        train_length = getattr(getattr(self.trainer, "datamodule", None), "train_seq_len", None)
        if stage == "fit" and train_length:
            for module in self.modules():
                if isinstance(module, PositionalEncoding) and (note := module.untrained_note(int(train_length))):
                    rank_zero_warn(note)

    def log_evaluation(self, values: dict) -> None:
        """Log an evaluation's values, which torchmetrics already reduced across processes (the same on every
        rank). `sync_dist` with `max` says so to Lightning, which otherwise warns once per metric under DDP (a
        flood at one metric per length); the max of equal values is exact, one all-reduce per value and
        evaluation, none in a single process."""
        self.log_dict(values, sync_dist=True, reduce_fx="max")

    def record_outcomes(self, stage: str, **columns: Tensor) -> None:
        """Keep an evaluation batch's per-example outcomes (`columns`, (B,) each) in `self.outcomes[stage]` (an
        `outcomes.ExampleOutcomes`), each example with its `id`: its index in the evaluation dataset (with several
        loaders, as a causal LM's one per context: in their datasets concatenated in loader order, so the ids of a
        stage are 0..N-1). The loaders never shuffle an evaluation set, and under DDP process r of W gets the
        examples r, r + W, r + 2W, ... (datamodules/loaders.py's UnrepeatedDistributedSampler, which repeats none
        to even out the processes), so the ids follow from the examples each process has seen, with no host sync.
        A loader in any other order (checked at its first batch) keeps none, with one warning."""
        size = len(next(iter(columns.values())))
        key = (stage, getattr(self, "_loader_index", 0))
        counts = self.__dict__.setdefault("_outcome_counts", {})
        if key not in counts:
            in_order = self._in_dataset_order(stage, key[1])
            counts[key] = (0, self._loader_offset(stage, key[1])) if in_order else (-1, 0)
        start, offset = counts[key]
        if start < 0:
            return
        counts[key] = (start + size, offset)
        rank, world = self.global_rank, self.trainer.world_size
        ids = offset + rank + world * (start + torch.arange(size, device=next(iter(columns.values())).device))
        self.outcomes[stage].update(id=ids, **columns)

    def _stage_loaders(self, stage: str) -> list | None:
        """The stage's evaluation loaders in order (one or several); None outside a Trainer's loop."""
        trainer = self.attached_trainer
        loaders = getattr(trainer, "val_dataloaders" if stage == "val" else "test_dataloaders", None)
        return None if loaders is None else list(loaders) if isinstance(loaders, (list, tuple)) else [loaders]

    def _loader_offset(self, stage: str, index: int) -> int:
        """The number of examples in the stage's loaders before the `index`-th (the first id of its examples)."""
        return sum(len(loader.dataset) for loader in self._stage_loaders(stage)[:index])

    def _in_dataset_order(self, stage: str, index: int) -> bool:
        """Whether the stage's `index`-th loader yields its dataset in order (this process's share under DDP)."""
        loaders = self._stage_loaders(stage)
        if loaders is None:  # evaluated outside a Trainer's loop (a direct call): no loader, no stable ids
            return False
        loader = loaders[index]
        sampler = getattr(loader, "sampler", None)
        if self.trainer.world_size > 1:
            ordered = isinstance(sampler, UnrepeatedDistributedSampler) and not sampler.shuffle
        else:
            ordered = isinstance(sampler, SequentialSampler)
        if not ordered:
            rank_zero_warn(
                f"per-example outcomes of {stage} are not kept: its loader's sampler {type(sampler).__name__} does "
                "not give the examples in dataset order, so they would have no stable ids"
            )
        return ordered

    def finish_outcomes(self, stage: str) -> None:
        """At an evaluation's end (every process: it gathers): its per-example outcomes, sorted by id, into
        `evaluation_outcomes[stage]` (what the run's record writer saves); none for a sanity check."""
        metric = self.outcomes[stage]
        table = metric.compute() if metric.update_called else {}
        metric.reset()
        counts = self.__dict__.setdefault("_outcome_counts", {})
        for key in [k for k in counts if k[0] == stage]:
            del counts[key]
        trainer = self.attached_trainer
        if trainer is not None and not trainer.sanity_checking:
            self.evaluation_outcomes[stage] = table

    @property
    def evaluation_outcomes(self) -> dict[str, dict]:
        """{stage: {column: numpy array}}: the per-example outcomes of the last evaluation of each stage."""
        return self.__dict__.setdefault("_evaluation_outcomes", {})

    def watch_loss(self, loss) -> None:
        """Note a non-finite training loss for the next divergence check (no host sync)."""
        if getattr(self, "divergence", None) is None:
            self.divergence = DivergenceWatch()
        self.divergence.watch(loss, self.global_step)

    def check_diverged(self) -> None:
        """One line and a stop (DivergedError) if a training loss since the start was not finite (one read)."""
        if getattr(self, "divergence", None) is not None:
            self.divergence.check(self.hparams.lr)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self.global_step % (self.trainer.log_every_n_steps or 50) == 0:
            self.check_diverged()

    def on_validation_start(self) -> None:
        if not self.trainer.sanity_checking:
            self.check_diverged()

    def on_train_end(self) -> None:
        self.check_diverged()

    def _eval_step(self, batch: dict, stage: str) -> None:
        raise NotImplementedError

    def _eval_epoch_end(self, stage: str):
        raise NotImplementedError

    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._loader_index = dataloader_idx
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._loader_index = dataloader_idx
        self._eval_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def warmup(self, total_steps: float) -> int:
        return self.hparams.warmup_steps

    def configure_optimizers(self):
        hp, total = self.hparams, self.trainer.estimated_stepping_batches
        return adamw_with_schedule(self, hp.lr, hp.weight_decay, self.warmup(total), hp.lr_decay, total)
