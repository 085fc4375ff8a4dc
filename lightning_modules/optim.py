"""AdamW with linear warm-up and a decay schedule, shared by every task module."""

import math
from typing import Literal

import torch
from torch import nn

from pe_core.errors import ConfigError, DivergedError

LR_DECAYS = ("constant", "linear", "cosine")
LRDecay = Literal[LR_DECAYS]  # the type of every task module's lr_decay: --help lists the choices


def check_lr_decay(decay: str) -> None:
    if decay not in LR_DECAYS:
        raise ConfigError(f"unknown lr_decay {decay!r}; choose one of: {', '.join(LR_DECAYS)}")


def lr_factor(decay: str, warmup_steps: int, total_steps: float):
    """step -> multiplier: linear warm-up over warmup_steps, then constant, linear or cosine decay to 0."""
    check_lr_decay(decay)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1.0, total_steps - warmup_steps))
        if decay == "linear":
            return 1.0 - progress
        if decay == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return factor


def adamw_with_schedule(
    module: nn.Module, lr: float, weight_decay: float, warmup_steps: int, decay: str, total_steps: float
) -> dict:
    """Lightning optimizer config: AdamW (no decay on biases, norms and 1-d scales), stepped per batch."""
    params = [p for p in module.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(decay, warmup_steps, total_steps))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def check_finite(loss: torch.Tensor, step: int, lr: float) -> None:
    """Stop a diverged run with one line that says where and what to try (its record says `diverged`).
    Reads the loss on the host (a device sync): the training steps use `DivergenceWatch` instead."""
    if not torch.isfinite(loss):
        raise DivergedError(
            f"train/loss is {loss.item()} at step {step}; "
            f"lower --model.lr (now {lr:g}) or set --trainer.gradient_clip_val"
        )


class DivergenceWatch:
    """The first non-finite training loss, found without a host sync per step.

    `watch(loss, step)` keeps, on the loss's device, the first step whose loss was not finite and that loss
    (two small device ops, no read); `check(lr)` reads them once (a device sync) and raises `check_finite`'s
    one-line DivergedError naming that step. The task modules check every `log_every_n_steps` steps (when
    Lightning reads the logged loss anyway), before each validation and when training ends.
    """

    def __init__(self):
        self.step: torch.Tensor | None = None  # first non-finite step, -1 while none
        self.loss: torch.Tensor | None = None

    def watch(self, loss: torch.Tensor, step: int) -> None:
        loss = loss.detach().float()
        if self.step is None or self.step.device != loss.device:
            self.step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self.loss = torch.zeros((), device=loss.device)
        first = ~torch.isfinite(loss) & (self.step < 0)
        self.step = torch.where(first, step, self.step)
        self.loss = torch.where(first, loss, self.loss)

    def check(self, lr: float) -> None:
        if self.step is not None and (step := int(self.step)) >= 0:
            check_finite(self.loss, step, lr)
