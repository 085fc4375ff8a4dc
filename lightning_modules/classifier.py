"""LightningModule for sentence(-pair) classification and regression: GLUE fine-tuning and from scratch, and
any text-classification set with any number of classes (datamodules/text_classification.py)."""

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import (
    BinaryAccuracy,
    BinaryF1Score,
    BinaryMatthewsCorrCoef,
    MulticlassAccuracy,
    MulticlassF1Score,
)
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from lightning_modules import metrics as M
from lightning_modules.arch import ArchConfig
from lightning_modules.checkpoint_io import load_checkpoint
from lightning_modules.compiling import compile_blocks
from lightning_modules.optim import LRDecay
from lightning_modules.outcomes import ExampleOutcomes, content_hash
from lightning_modules.task_module import TaskModule, options_help
from lightning_modules.transformer import Transformer
from pe_core.errors import ConfigError
from pe_core.ranges import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat

# GLUE's metrics per task (Wang et al. 2019); the task score is their mean, as on the GLUE leaderboard.
GLUE_METRICS = {
    "sst2": ("acc",),
    "cola": ("mcc",),
    "mrpc": ("f1", "acc"),
    "rte": ("acc",),
    "stsb": ("pearson", "spearman"),
}
METRICS = {
    "acc": BinaryAccuracy,
    "f1": BinaryF1Score,
    "mcc": BinaryMatthewsCorrCoef,
    "pearson": PearsonCorrCoef,
    "spearman": SpearmanCorrCoef,
}
POOLINGS = ("cls", "mean")
SCORE = "score"


def task_metrics(task: str, num_labels: int) -> MetricCollection:
    """The task's GLUE metrics; for any other task with classes accuracy and macro-F1 over `num_labels`
    classes (`acc`, `macro_f1`); Pearson/Spearman for regression (one output)."""
    if task in GLUE_METRICS:
        return MetricCollection({n: METRICS[n]() for n in GLUE_METRICS[task]})
    if num_labels > 1:
        return MetricCollection({
            "acc": MulticlassAccuracy(num_labels, average="micro"),
            "macro_f1": MulticlassF1Score(num_labels, average="macro"),
        })  # fmt: skip
    return MetricCollection({n: METRICS[n]() for n in ("pearson", "spearman")})


def score_names(task: str, names) -> list[str]:
    """Metrics averaged into `score`: all of a GLUE task's (as the leaderboard), else accuracy when there is
    one (PE-Study's metric), else all."""
    return list(names) if task in GLUE_METRICS or "acc" not in names else ["acc"]


@options_help(
    pooling="'cls' (the state at position 0) or 'mean' (over real tokens)",
    init_from="a MaskedLMModel checkpoint to fine-tune (a path, or run:NAME for a run of this out_root)",
    warmup_ratio="warm-up as a fraction of all steps (0.06 in TUPE); wins over warmup_steps if set",
    task="the task (linked from data.task)",
    num_labels="number of classes; 1 = regression (linked from data.num_labels)",
    labels="class names in id order (linked from data.label_names)",
)
class SequenceClassifier(TaskModule):
    """Transformer encoder + a head on the [CLS] state (or the mean of the states): GLUE and PE-Study.

    Fine-tuning (TUPE, Ke et al. 2021): `init_from` a MaskedLMModel checkpoint; its encoding and sizes
    must equal this model's (checked, one clear error naming the first difference) and its encoder weights
    are loaded; the data reads the checkpoint's tokenizer (`cli.py` links init_from to the data).
    From scratch (PE-Study, Wang & Chen 2020): the same module with `init_from` unset, e.g. 1 layer,
    d=256, 8 heads, FFN 512 (configs/glue_from_scratch.yaml). Two classes use cross-entropy; one output
    (STS-B) regresses the score with mean squared error. Logs `train/loss`, `val/loss`, every GLUE
    metric of the task (`val/acc`, `val/f1`, `val/mcc`, `val/pearson`, `val/spearman`) and `val/score`,
    their mean. Any other task (datamodules/text_classification.py) logs `val/acc` and `val/macro_f1` over
    `num_labels` classes and `val/score` = accuracy. `task`, `num_labels`, `labels` (the class names, kept in
    the hparams so a checkpoint knows them), `arch.vocab_size` and `arch.max_length` are linked from the data.
    """

    def __init__(
        self,
        # --model.arch.*; vocab_size and max_length are linked from the data
        arch: ArchConfig = ArchConfig(
            encoding="learned", dim=256, depth=1, num_heads=8, ffn_mult=2, dropout=0.1, max_length=128
        ),  # fmt: skip
        pooling: str = "cls",  # "cls" (state at position 0) or "mean" (over real tokens)
        init_from: str | None = None,  # MaskedLMModel checkpoint to fine-tune
        lr: PositiveFloat = 1e-4,
        weight_decay: NonNegativeFloat = 0.01,
        warmup_steps: NonNegativeInt = 0,
        warmup_ratio: Fraction | None = None,  # warm-up as a fraction of all steps (0.06 in TUPE); wins if set
        lr_decay: LRDecay = "linear",
        task: str = "sst2",  # linked from data.task
        num_labels: int = 2,  # linked from data.num_labels; 1 = regression
        labels: list[str] | None = None,  # linked from data.label_names: class names in id order
        compile: bool = False,  # torch.compile the blocks (opt-in; see lightning_modules/compiling.py)
    ):
        super().__init__()
        self.arch = self.save_arch_hyperparameters(arch)
        if pooling not in POOLINGS:
            raise ConfigError(f"unknown pooling {pooling!r}; choose one of: {', '.join(POOLINGS)}")
        if labels is not None and len(labels) != num_labels:
            raise ConfigError(f"num_labels={num_labels} but {len(labels)} class names were given: {labels}")
        self.transformer = Transformer(self.arch, causal=False, cls_first=True)
        if compile:
            compile_blocks(self.transformer)
        self.head = nn.Sequential(nn.Dropout(self.arch.dropout), nn.Linear(self.arch.dim, num_labels))
        self.metrics = nn.ModuleDict({s: task_metrics(task, num_labels) for s in ("val", "test")})
        self.losses = nn.ModuleDict({s: MeanMetric() for s in ("val", "test")})
        columns = ("id", "hash", "label", "nll") + (("score",) if num_labels == 1 else ("correct",))
        self.outcomes = nn.ModuleDict({s: ExampleOutcomes(columns) for s in ("val", "test")})
        if init_from:
            self.load_encoder(init_from)

    def load_encoder(self, path: str) -> None:
        """Copy a pre-trained encoder in after checking that it has this model's encoding and sizes."""
        checkpoint = load_checkpoint(path)
        saved = ArchConfig.from_hparams(checkpoint.get("hyper_parameters", {}))
        key = self.arch.first_difference(
            saved, ignore=("dropout", "token_init_std", "attention_backend")
        )  # may change for fine-tuning
        if key is not None:
            raise ConfigError(
                f"init_from {path}: the checkpoint has arch.{key}={getattr(saved, key)!r} but this model has "
                f"arch.{key}={getattr(self.arch, key)!r}; fine-tune with the pre-training run's encoding and sizes"
            )
        prefix = "transformer."
        state = {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
        self.transformer.load_state_dict(state)

    def forward(self, tokens: Tensor, padding_mask: Tensor) -> Tensor:
        """(B, num_labels) logits, or (B,) scores for regression."""
        hidden = self.transformer(tokens, padding_mask=padding_mask)  # (B, L, C)
        if self.hparams.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = padding_mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
            pooled = (hidden * weights).sum(1) / weights.sum(1)
        out = self.head(pooled)
        return out.squeeze(-1) if self.hparams.num_labels == 1 else out

    def loss_and_predictions(self, batch: dict, stage: str | None = None) -> tuple[Tensor, Tensor]:
        """The batch's mean loss and predictions; with an evaluation `stage`, its per-example outcomes too."""
        out = self(batch["tokens"], batch["padding_mask"]).float()
        if self.hparams.num_labels == 1:
            losses, predictions = F.mse_loss(out, batch["labels"].float(), reduction="none"), out
            kept = {"score": out}
        else:
            losses = F.cross_entropy(out, batch["labels"].long(), reduction="none")
            predictions = out.argmax(-1)
            kept = {"correct": predictions == batch["labels"].long()}
        if stage is not None:
            digest = content_hash((batch["tokens"], batch["padding_mask"]))
            self.record_outcomes(stage, hash=digest, label=batch["labels"], nll=losses, **kept)
        return losses.mean(), predictions

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss, _ = self.loss_and_predictions(batch)
        self.watch_loss(loss)
        self.log(M.TRAIN_LOSS, loss)  # not prog_bar: Lightning reads those every step
        return loss

    def _eval_step(self, batch: dict, stage: str) -> None:
        loss, predictions = self.loss_and_predictions(batch, stage)
        labels = batch["labels"] if self.hparams.num_labels == 1 else batch["labels"].long()
        self.losses[stage].update(loss, weight=len(labels))
        self.metrics[stage].update(predictions, labels)

    def _eval_epoch_end(self, stage: str) -> None:
        computed = {k: v.item() for k, v in self.metrics[stage].compute().items()}
        scored = score_names(self.hparams.task, computed)
        values = {M.name(stage, k): v for k, v in computed.items()}
        values[M.name(stage, SCORE)] = sum(computed[k] for k in scored) / len(scored)
        values[M.name(stage, M.LOSS)] = self.losses[stage].compute().item()
        self.metrics[stage].reset()
        self.losses[stage].reset()
        self.finish_outcomes(stage)
        self.log_evaluation(values)

    def warmup(self, total_steps: float) -> int:
        ratio = self.hparams.warmup_ratio
        return int(ratio * total_steps) if ratio is not None else self.hparams.warmup_steps
