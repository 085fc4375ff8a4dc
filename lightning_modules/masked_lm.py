"""LightningModule for TUPE-style masked-LM pre-training; its checkpoints seed GLUE fine-tuning."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from lightning_modules import metrics as M
from lightning_modules.arch import ArchConfig
from lightning_modules.compiling import compile_blocks
from lightning_modules.optim import LRDecay
from lightning_modules.outcomes import ExampleOutcomes, content_hash
from lightning_modules.task_module import TaskModule, options_help
from lightning_modules.transformer import Transformer
from pe_core.ranges import NonNegativeFloat, NonNegativeInt, PositiveFloat

TOKENIZER_KEY = "tokenizer"  # checkpoint entry holding the tokenizer JSON (read by datamodules.glue)


class MLMHead(nn.Module):
    """BERT's prediction head: dense + GELU + LayerNorm, then logits tied to the token embedding."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        vocab_size, dim = embedding.weight.shape
        self.transform = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim))
        self.embedding = embedding
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: Tensor) -> Tensor:
        return F.linear(self.transform(hidden), self.embedding.weight, self.bias)  # (N, V)


@options_help()
class MaskedLMModel(TaskModule):
    """Bidirectional encoder pre-trained with BERT's masked-LM objective, as TUPE compares encodings.

    Ke, He & Liu 2021 ("Rethinking Positional Encoding in Language Pre-training"): MLM only, 15 %
    masking with 80/10/10 (see datamodules.masked_lm), post-LN BERT layers, Adam with linear warm-up
    then linear decay, [CLS] at position 0. The paper's models are registry entries: BERT-A `learned`,
    BERT-R `bert_r`, TUPE-A `tupe_a`, TUPE-R `tupe_r`, TUPE-A with tied [CLS] the preset `tupe_a_tied`
    (`tupe_a` with `untie_cls: false`; sweeps/tupe_glue.yaml). Logs `train/loss`, `val/loss`
    (masked-token cross-entropy), `val/acc` (masked-token accuracy) and `val/ppl`. Every checkpoint also
    stores the data's tokenizer, so `SequenceClassifier(init_from=...)` reads text the way pre-training did.

    Per-example outcomes (lightning_modules/outcomes.py), one row per evaluation block: `id`, `hash` (of its
    inputs and masked targets), `nll` (mean NLL of its masked tokens), `tokens` (masked tokens: 0 for a block
    with none, whose nll and tok_acc are then 0) and `tok_acc`. val/loss is the token-weighted mean of `nll`,
    val/acc that of `tok_acc` (both are means over masked tokens).
    """

    def __init__(
        self,
        # --model.arch.*; vocab_size and max_length (the block size) are linked from the data
        arch: ArchConfig = ArchConfig(encoding="tupe_a", dim=256, depth=4, dropout=0.1, post_norm=True, max_length=128),
        lr: PositiveFloat = 5e-4,
        weight_decay: NonNegativeFloat = 0.01,
        warmup_steps: NonNegativeInt = 100,
        lr_decay: LRDecay = "linear",
        compile: bool = False,  # torch.compile the blocks (opt-in; see lightning_modules/compiling.py)
    ):
        super().__init__()
        self.arch = self.save_arch_hyperparameters(arch)
        self.transformer = Transformer(self.arch, causal=False, cls_first=True)
        if compile:
            compile_blocks(self.transformer)
        self.head = MLMHead(self.transformer.token_emb)
        self.losses = nn.ModuleDict({s: MeanMetric() for s in ("val", "test")})
        self.accuracy = nn.ModuleDict(
            {s: MulticlassAccuracy(self.arch.vocab_size, average="micro") for s in ("val", "test")}
        )
        columns = ("id", "hash", "nll", "tokens", "tok_acc")
        self.outcomes = nn.ModuleDict({s: ExampleOutcomes(columns) for s in ("val", "test")})

    def masked_logits(self, batch: dict) -> tuple[Tensor, Tensor]:
        """(N, V) logits and (N,) targets at the N selected (masked) positions only."""
        hidden = self.transformer(batch["tokens"])  # (B, L, C)
        selected = batch["targets"] != -100  # (B, L)
        return self.head(hidden[selected]), batch["targets"][selected]

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        logits, targets = self.masked_logits(batch)
        loss = F.cross_entropy(logits.float(), targets)
        self.watch_loss(loss)
        self.log(M.TRAIN_LOSS, loss)  # not prog_bar: Lightning reads those every step
        return loss

    def _eval_step(self, batch: dict, stage: str) -> None:
        logits, targets = self.masked_logits(batch)
        losses = F.cross_entropy(logits.float(), targets, reduction="none")  # (N,)
        self._record_block_outcomes(batch, losses, logits.argmax(-1) == targets, stage)
        if targets.numel() == 0:
            return
        self.losses[stage].update(losses.mean(), weight=targets.numel())  # mean over masked tokens
        self.accuracy[stage].update(logits.argmax(-1), targets)

    def _record_block_outcomes(self, batch: dict, losses: Tensor, right: Tensor, stage: str) -> None:
        """Per block: the mean NLL, count and accuracy of its masked tokens (`losses`, `right`: (N,) over the
        batch's masked tokens in row-major order, as `masked_logits` selects them)."""
        tokens, targets = batch["tokens"], batch["targets"]
        selected = targets != -100  # (B, L)
        rows = selected.nonzero()[:, 0]  # (N,) the block of each masked token
        count = selected.sum(1)  # (B,)
        nll = torch.zeros(len(tokens), device=losses.device).index_add_(0, rows, losses)
        hits = torch.zeros(len(tokens), device=losses.device).index_add_(0, rows, right.float())
        self.record_outcomes(
            stage, hash=content_hash((tokens, torch.ones_like(selected)), (targets, selected)),
            nll=nll / count.clamp(min=1), tokens=count, tok_acc=hits / count.clamp(min=1),
        )  # fmt: skip

    def _eval_epoch_end(self, stage: str) -> None:
        loss = self.losses[stage].compute().item()
        values = {
            M.name(stage, M.LOSS): loss,
            M.name(stage, M.ACC): self.accuracy[stage].compute().item(),
            M.name(stage, "ppl"): math.exp(min(loss, 700.0)),
        }
        self.losses[stage].reset()
        self.accuracy[stage].reset()
        self.finish_outcomes(stage)
        self.log_evaluation(values)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        tokenizer = getattr(getattr(self.trainer, "datamodule", None), "tokenizer", None)
        if tokenizer is not None:
            checkpoint[TOKENIZER_KEY] = tokenizer.to_str()
