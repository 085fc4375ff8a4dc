"""LightningModule for the synthetic length-generalisation tasks (the registry in datamodules/tasks)."""

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MaxMetric, MeanMetric, SumMetric

from lightning_modules import metrics as M
from lightning_modules.arch import ArchConfig
from lightning_modules.compiling import compile_blocks
from lightning_modules.optim import LRDecay
from lightning_modules.outcomes import ExampleOutcomes, content_hash
from lightning_modules.task_module import TaskModule, options_help
from lightning_modules.transformer import Transformer
from pe_core.errors import ConfigError
from pe_core.ranges import NonNegativeFloat, NonNegativeInt, PositiveFloat

DEPTH_BINS = 5  # needle depths [0, 0.2), [0.2, 0.4), ..., [0.8, 1], logged as val/acc_depth_0 ... _80


@options_help()
class SyntheticTaskModel(TaskModule):
    """Predict a task's answer tokens: decoder-only causal LM or bidirectional encoder.

    Causal (`causal=True`, Kazemnejad et al. 2023's protocol): the sequence is `prompt SEP answer`,
    next-token loss on the answer only. Bidirectional: the input is `prompt SEP MASK...` and the
    answer is predicted at every MASK slot at once, so encoder-side methods (TUPE) are compared too.
    Logs exact match and token accuracy per length, in distribution (`val/acc`) and beyond the training lengths
    (`val/acc_ood`), with the evaluation set's binomial standard errors (`val/acc_se`, `val/acc_ood_se`,
    `val/acc_se_len_<n>`) and the accuracy of the best input-blind answer on the same in-distribution examples
    (`val/acc_constant`, compare's `precondition: baseline`); for a task whose examples carry the answer's depth in
    the prompt (passkey), exact match by depth bin too (`val/acc_depth_<percent>`, over all evaluated lengths). A
    task that supplies its own position ids (abacus, coupling) has them in the batch; they go to the Transformer
    instead of 0..L-1. `arch.vocab_size`, `arch.max_length` and `causal` are linked with the data by `cli.py`; the
    in-distribution boundary is read from the datamodule. `compile`: torch.compile the Transformer's blocks
    (lightning_modules/compiling.py).
    """

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(),  # --model.arch.*: encoding and sizes; vocab_size, max_length from the data
        causal: bool = True,
        lr: PositiveFloat = 1e-3,
        weight_decay: NonNegativeFloat = 0.0,
        warmup_steps: NonNegativeInt = 0,
        lr_decay: LRDecay = "cosine",
        compile: bool = False,  # torch.compile the blocks (opt-in; see lightning_modules/compiling.py)
    ):
        super().__init__()
        self.arch = self.save_arch_hyperparameters(arch)
        self.transformer = Transformer(self.arch, causal=causal)
        if compile:
            compile_blocks(self.transformer)
        self.head = nn.Linear(self.arch.dim, self.arch.vocab_size)
        self.per_length = nn.ModuleDict({s: M.PerLengthAccuracy(self.arch.max_length) for s in ("val", "test")})
        self.losses = nn.ModuleDict({s: MeanMetric() for s in ("val", "test")})
        self.examples = nn.ModuleDict({s: SumMetric() for s in ("val", "test")})  # evaluated, over all ranks
        # by depth bin (the bins in place of lengths); updated only by batches with a depth
        self.per_depth = nn.ModuleDict({s: M.PerLengthAccuracy(DEPTH_BINS - 1) for s in ("val", "test")})
        self.best_acc = MaxMetric()
        columns = ("id", "hash", "correct", "tok_acc", "nll", "length")
        self.outcomes = nn.ModuleDict({s: ExampleOutcomes(columns) for s in ("val", "test")})

    @property
    def train_max_len(self) -> int:
        """In-distribution boundary, from the data (lengths above it count as beyond-length)."""
        return self.trainer.datamodule.train_max_len

    def forward(self, batch: dict) -> Tensor:
        positions = batch.get("positions")  # (B, L) the task's own ids, or None: the Transformer's default
        if positions is not None and self.transformer.encoding.randomize_positions:
            raise ConfigError(
                "the task supplies its own position ids (data.task_options positions) and the encoding's "
                "randomize_positions would be ignored for them; set one of the two"
            )
        hidden = self.transformer(batch["tokens"], positions, padding_mask=batch["padding_mask"])  # (B, L, C)
        return self.head(hidden)  # (B, L, V)

    def loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss = self.loss(self(batch), batch["targets"])
        self.watch_loss(loss)
        self.log(M.TRAIN_LOSS, loss)  # not prog_bar: Lightning reads those every step
        return loss

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Record how many positions the training inputs reached (`probe --ckpt` marks the rest untrained)."""
        trained = getattr(self.trainer.datamodule, "train_seq_len", None)
        if trained is not None:
            checkpoint["trained_positions"] = int(trained)

    def _eval_step(self, batch: dict, stage: str) -> None:
        logits = self(batch)
        inside = batch["length"] <= self.train_max_len
        if inside.any():  # loss in distribution only: beyond-length losses would swamp it
            targets = batch["targets"][inside]
            # weighted by answer tokens: the mean over all of them, whatever the batches or processes
            self.losses[stage].update(self.loss(logits[inside], targets), weight=(targets != -100).sum())
        self.per_length[stage].update(logits.argmax(-1), batch["targets"], batch["length"])
        self.examples[stage].update(len(batch["length"]))
        if "depth" in batch:
            bins = (batch["depth"] * DEPTH_BINS).long().clamp(max=DEPTH_BINS - 1)  # (B,)
            self.per_depth[stage].update(logits.argmax(-1), batch["targets"], bins)
        self._record_outcomes(batch, logits, stage)

    def _record_outcomes(self, batch: dict, logits: Tensor, stage: str) -> None:
        """Per example: exact match, token accuracy, mean answer-token NLL and its task length."""
        targets = batch["targets"]
        supervised = targets != -100  # (B, L)
        tokens = supervised.sum(1)  # (B,)
        right = ((logits.argmax(-1) == targets) & supervised).sum(1)
        nll = F.cross_entropy(logits.float().transpose(1, 2), targets, ignore_index=-100, reduction="none").sum(1)
        self.record_outcomes(
            stage, hash=content_hash((batch["tokens"], batch["padding_mask"]), (targets, supervised)),
            correct=right == tokens, tok_acc=right / tokens.clamp(min=1), nll=nll / tokens.clamp(min=1),
            length=batch["length"],
        )  # fmt: skip

    def _eval_epoch_end(self, stage: str) -> dict[str, float]:
        per_length = self.per_length[stage].compute()
        values = M.summarise(per_length, stage, self.train_max_len)
        examples = self.per_length[stage].examples_per_length()
        values |= M.standard_errors(per_length, examples, stage, self.train_max_len)
        values[M.name(stage, M.LOSS)] = self.losses[stage].compute().item()
        values[M.name(stage, "examples")] = self.examples[stage].compute().item()
        values |= self._depth_values(stage)
        constant = getattr(self.trainer.datamodule, "constant_accuracy", None)  # the evaluation set's own baseline
        if constant is not None and (baseline := constant(stage)) is not None:
            values[M.name(stage, "acc_constant")] = baseline
        for metric in (self.per_length[stage], self.losses[stage], self.examples[stage], self.per_depth[stage]):
            metric.reset()
        self.finish_outcomes(stage)
        self.log_evaluation(values)
        return values

    def _depth_values(self, stage: str) -> dict[str, float]:
        """`<stage>/acc_depth_<percent>`: exact match of the examples whose depth falls in the bin starting there."""
        if not getattr(self.trainer.datamodule, "depth", False):  # the task's, so every DDP rank agrees
            return {}
        per_bin = self.per_depth[stage].compute()
        return {M.name(stage, f"acc_depth_{b * 100 // DEPTH_BINS}"): acc for b, (acc, _) in per_bin.items()}

    def on_validation_epoch_end(self) -> None:
        values = self._eval_epoch_end("val")
        if not self.trainer.sanity_checking and M.name("val", M.ACC) in values:
            self.best_acc.update(values[M.name("val", M.ACC)])
            self.log_evaluation({M.ACC_BEST: self.best_acc.compute()})
