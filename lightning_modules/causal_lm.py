"""LightningModule for causal language modelling with perplexity at the training and longer contexts."""

import math

import torch
import torch.nn.functional as F
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor, nn
from torchmetrics import Metric

from lightning_modules import metrics as M
from lightning_modules.arch import ArchConfig
from lightning_modules.compiling import compile_blocks
from lightning_modules.optim import LRDecay
from lightning_modules.outcomes import ExampleOutcomes, content_hash
from lightning_modules.task_module import TaskModule, options_help
from lightning_modules.transformer import Transformer
from pe_core.errors import ConfigError
from pe_core.ranges import NonNegativeFloat, NonNegativeInt, PositiveFloat
from pe_core.vocab import IGNORE_INDEX

PPL = "ppl"


def context_name(stage: str, context: int, stride: int | None = None) -> str:
    """Per-context perplexity name: "val/ppl_ctx_256" (non-overlapping windows) or, for the sliding-window
    evaluation with stride S, "val/ppl_ctx_256_stride_S"."""
    return M.name(stage, f"{PPL}_ctx_{context}" + ("" if stride is None else f"_stride_{stride}"))


class PerContextLoss(Metric):
    """Summed token losses and token counts per context length, summed across devices (DDP-safe).

    update(loss_sum, tokens, context); compute() -> {context: mean token loss} for every context seen.
    """

    full_state_update = False

    def __init__(self, max_length: int):
        super().__init__()
        self.add_state("loss_sum", default=torch.zeros(max_length + 1, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("tokens", default=torch.zeros(max_length + 1, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, loss_sum: Tensor, tokens: int, context: int) -> None:
        self.loss_sum[context] += loss_sum.double()
        self.tokens[context] += tokens

    def compute(self) -> dict[int, float]:
        seen = self.tokens.nonzero().flatten().tolist()
        return {n: (self.loss_sum[n] / self.tokens[n]).item() for n in seen}


@options_help()
class CausalLMModel(TaskModule):
    """Decoder-only Transformer language model, scored by perplexity per context length.

    Protocol: PE-Study (Wang & Chen 2020) trains GPT-2-style LMs at block size 128 and compares
    position embeddings by perplexity; Press et al. 2022 (ALiBi) train at context L and evaluate at
    L, 2L, 4L with non-overlapping windows, where sinusoidal and learned absolute blow up, and with a
    sliding window. Logs `train/loss`; `val/loss` and `val/ppl` at the training context (the datamodule's
    block_size) and `val/ppl_ctx_<n>` for every evaluation context n (same for `test/`); batches that
    carry a `stride` S (the data's `eval_stride`: sliding windows, targets IGNORE_INDEX where context only)
    go to `val/ppl_ctx_<n>_stride_<S>` instead. Only scored targets count. `max_length` is linked to the
    data's longest context, so learned tables have rows for it (rows beyond the training context stay
    untrained, as in the ALiBi paper); should an encoding still serve fewer positions than a context, that
    context's perplexity is logged as inf with one warning instead of failing the run. `compile`:
    torch.compile the Transformer's blocks (lightning_modules/compiling.py).

    Per-example outcomes (lightning_modules/outcomes.py), one row per evaluation window of every loader: `id`
    (the window's index in the stage's loaders concatenated), `hash`, `nll` (mean NLL of its scored tokens),
    `tokens` (scored), `tok_acc` (argmax accuracy on them), `context` (window length) and `stride` (0 for the
    non-overlapping windows). val/loss is the token-weighted mean of `nll` over the rows of context = block size
    and stride 0; val/ppl_ctx_<n>(_stride_<S>) is exp of the token-weighted mean over its rows. A window of a
    context the encoding cannot serve keeps its row, with nll inf and tok_acc 0.
    """

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(max_length=512),  # --model.arch.*; vocab_size, max_length from the data
        lr: PositiveFloat = 1e-3,
        weight_decay: NonNegativeFloat = 0.0,
        warmup_steps: NonNegativeInt = 0,
        lr_decay: LRDecay = "cosine",
        causal: bool = True,
        compile: bool = False,  # torch.compile the blocks (opt-in; see lightning_modules/compiling.py)
    ):
        super().__init__()
        self.arch = self.save_arch_hyperparameters(arch)
        if not causal:
            raise ConfigError("CausalLMModel needs causal attention; set --model.causal=true")
        self.transformer = Transformer(self.arch, causal=True)
        if compile:
            compile_blocks(self.transformer)
        self.head = nn.Linear(self.arch.dim, self.arch.vocab_size)
        max_length = self.arch.max_length  # the longest evaluation context
        self.per_context = nn.ModuleDict({s: PerContextLoss(max_length) for s in ("val", "test")})
        self.sliding = nn.ModuleDict({s: PerContextLoss(max_length) for s in ("val", "test")})  # eval_stride
        self.stride: int | None = None  # the sliding windows' stride, once a batch has shown it
        self.unservable: dict[str, set[tuple[int, int | None]]] = {"val": set(), "test": set()}
        self.warned: set[int] = set()  # contexts already warned about (once per run)
        columns = ("id", "hash", "nll", "tokens", "tok_acc", "context", "stride")
        self.outcomes = nn.ModuleDict({s: ExampleOutcomes(columns) for s in ("val", "test")})

    @property
    def train_context(self) -> int | None:
        """The training context (data.block_size); None without a datamodule."""
        datamodule = self.attached_datamodule
        return getattr(datamodule, "block_size", None)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Record how many positions training reached, the block size (`probe --ckpt` marks the rest)."""
        trained = getattr(getattr(self.trainer, "datamodule", None), "block_size", None)
        if trained is not None:
            checkpoint["trained_positions"] = int(trained)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.head(self.transformer(tokens))  # (B, L, V)

    def token_losses(self, tokens: Tensor, targets: Tensor) -> Tensor:
        """(B, L) next-token cross-entropy; 0 where the target is IGNORE_INDEX (context only)."""
        return _token_losses(self(tokens), targets)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss = self.token_losses(batch["tokens"], batch["targets"]).mean()
        self.watch_loss(loss)
        self.log(M.TRAIN_LOSS, loss)  # not prog_bar: Lightning reads those every step
        return loss

    def servable(self, context: int) -> bool:
        limit = self.encoding.max_positions
        return limit is None or context <= limit

    def _eval_step(self, batch: dict, stage: str) -> None:
        context = batch["tokens"].shape[1]
        stride = int(batch["stride"][0]) if "stride" in batch else None
        if stride is not None:
            self.stride = stride
        if not self.servable(context):
            if context not in self.warned:
                self.warned.add(context)
                rank_zero_warn(
                    f"encoding {self.arch.encoding!r} serves {self.encoding.max_positions} positions, "
                    f"not {context}: {context_name(stage, context)} is logged as inf"
                )
            self.unservable[stage].add((context, stride))
            self._record_window_outcomes(batch, None, stage)
            return
        logits = self(batch["tokens"])
        losses = _token_losses(logits, batch["targets"])
        scored = int((batch["targets"] != IGNORE_INDEX).sum())
        metric = self.per_context[stage] if stride is None else self.sliding[stage]
        metric.update(losses.sum(), scored, context)
        self._record_window_outcomes(batch, logits, stage, losses)

    def _record_window_outcomes(self, batch: dict, logits: Tensor | None, stage: str, losses=None) -> None:
        """Per window: mean NLL, scored tokens and token accuracy (nll inf, tok_acc 0 without `logits`: a context
        the encoding cannot serve), its context and stride."""
        tokens, targets = batch["tokens"], batch["targets"]
        scored = targets != IGNORE_INDEX  # (B, L)
        count = scored.sum(1)  # (B,)
        if logits is None:
            nll = torch.full(count.shape, math.inf, device=count.device)
            right = torch.zeros_like(count)
        else:
            nll = losses.sum(1) / count.clamp(min=1)
            right = ((logits.argmax(-1) == targets) & scored).sum(1)
        stride = batch["stride"] if "stride" in batch else torch.zeros_like(count)
        self.record_outcomes(
            stage, hash=content_hash((tokens, torch.ones_like(scored)), (targets, scored)), nll=nll, tokens=count,
            tok_acc=right / count.clamp(min=1), context=torch.full_like(count, tokens.shape[1]), stride=stride,
        )  # fmt: skip

    def _eval_epoch_end(self, stage: str) -> dict[str, float]:
        losses = self.per_context[stage].compute()
        # without --data.eval_stride nothing updates the sliding-window metric (on any rank: it is the data's
        # setting), and computing it anyway made torchmetrics warn in every LM run
        sliding = self.sliding[stage].compute() if self.sliding[stage].update_called else {}
        self.per_context[stage].reset()
        self.sliding[stage].reset()
        values = {context_name(stage, n): _ppl(loss) for n, loss in losses.items()}
        values |= {context_name(stage, n, self.stride): _ppl(loss) for n, loss in sliding.items()}
        values |= {context_name(stage, n, stride): math.inf for n, stride in self.unservable[stage]}
        train_context = self.train_context or min(losses, default=None)
        if train_context in losses:
            values[M.name(stage, M.LOSS)] = losses[train_context]
            values[M.name(stage, PPL)] = _ppl(losses[train_context])
        self.unservable[stage] = set()
        self.finish_outcomes(stage)
        self.log_evaluation(values)
        return values


def _token_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """(B, L) next-token cross-entropy of (B, L, V) logits; 0 where the target is IGNORE_INDEX (context only)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none").view_as(targets)


def _ppl(loss: float) -> float:
    """exp(mean token loss); inf when it overflows."""
    return math.exp(loss) if loss < 700 else math.inf
