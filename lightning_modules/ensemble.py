"""Seed ensembles: k seeds of one configuration trained together as one batched model (issue 47, part 1).

A tiny model (d=64, 2 layers) runs far below its arithmetic's speed: each step is mostly Python, kernel launches
and optimizer bookkeeping. Training k seeds of the same configuration as one model whose weights carry a leading
member axis pays that overhead once for k runs. Each member stays an ordinary run: its own initialisation (built
after `seed_everything(seed)`, the same RNG calls as a solo run, so its initial weights are bit-equal), its own
data (its own data module seeded like the solo run's, so its own batches and order), its own AdamW state,
learning-rate schedule and gradient-norm clip (per member: a global norm across members would couple them), its
own losses, and its own early stop (`freeze`: its updates are dropped from then on while the others go on).

Design (the issue's): the members are built one by one, their parameters and persistent buffers stacked with
`torch.func.stack_module_state`, and forward + loss run as `torch.func.functional_call` of one template module
under `torch.vmap` over the member axis. Non-persistent buffers (position tables, a deterministic function of the
configuration) are shared through the template, which may grow them as a solo model does. AdamW is elementwise,
so one AdamW over the stacked tensors is k AdamWs (same hyper-parameters and step count; parameter groups by the
member's own dimension, as `adamw_with_schedule` groups them).

API (also what benchmarks/trials_per_hour.py uses):

    ensemble = SeedEnsemble(build, seeds=[0, 1, 2], device="cpu")  # build(seed) -> a task module (SyntheticTaskModel)
    ensemble.configure_optimizer(lr, weight_decay, warmup_steps, lr_decay, total_steps, gradient_clip_val=None)
    batches = stack_batches([next(it) for it in member_iterators], device="cpu")  # one per member, one length
    losses = ensemble.train_step(batches)                  # (k,) each member's training loss, then one optimizer step
    ensemble.freeze(i)                                     # member i stops (early stopping); its weights stay
    module = ensemble.member(i)                            # member i as an ordinary task module (its weights now)
    losses = ensemble.losses(batches)                      # (k,) losses without a step (evaluation)

    state = ensemble.member_state(i)                       # member i's state_dict tensors (views into the stack)
    ensemble.frozen                                        # (k,) bool: which members are frozen
    saved = ensemble.member_training_state(i)              # member i's AdamW moments and the schedule (resume)
    ensemble.load_member_training_state(i, weights, saved) # member i continues from them (fit's --ckpt_path)

`check_ensemble_encoding(name)` refuses, in one line, an encoding that cannot run under vmap (`NOT_VMAPPABLE`
says why for each); `SeedEnsemble` checks its members' layer encodings. Numerics: the members' batches are
padded to one length and the matmuls run batched (attention on SDPA's math kernel: vmap's choice of kernel
cannot learn a bias mask), so float32 sums reassociate: a member's loss equals its solo run's to ~5e-7 from the
first step, not bit for bit (tests/models/test_ensemble.py states the tolerances). Dropout and sampled positions
draw their randomness per member under vmap (`randomness="different"`), not the solo run's draws. `fit
--run.ensemble_seeds K` (pe_sweeps/runs/ensemble_fit.py) trains K seeds this way and writes K run records.
"""

import copy
from collections.abc import Callable, Sequence

import torch
from pytorch_lightning import seed_everything
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state
from torch.nn.attention import SDPBackend, sdpa_kernel

from lightning_modules.optim import lr_factor
from pe_core.errors import ConfigError
from pe_core.vocab import IGNORE_INDEX, PAD

# encoding -> why it cannot be a member of an ensemble (it does not run under torch.vmap); the others can
_CLAMPS_DATA = (
    "it clamps its parameters in place through `.data` before every use (KERPLE's code), which vmap cannot do"
)
NOT_VMAPPABLE: dict[str, str] = {"kerple_log": _CLAMPS_DATA, "kerple_power": _CLAMPS_DATA, "dape_kerple": _CLAMPS_DATA}

# how each batch key is padded to a common length (keys of shape (B, L)); others are stacked as they are
PAD_VALUES = {"tokens": PAD, "targets": IGNORE_INDEX, "padding_mask": False, "positions": 0}


def check_ensemble_encoding(encodings: str | Sequence[str]) -> None:
    """A one-line ConfigError if an encoding (or a schedule's) cannot train in an ensemble (`NOT_VMAPPABLE`)."""
    for name in [encodings] if isinstance(encodings, str) else encodings:
        if name in NOT_VMAPPABLE:
            from lightning_modules.encodings import ENCODINGS

            working = ", ".join(n for n in ENCODINGS if n not in NOT_VMAPPABLE)
            raise ConfigError(
                f"encoding {name!r} cannot train as a seed ensemble: {NOT_VMAPPABLE[name]}; "
                f"train its seeds one by one, or use one of: {working}"
            )


def stack_batches(batches: Sequence[dict], device: torch.device | str | None = None) -> dict[str, Tensor]:
    """One batch per member -> one dict of (k, B, ...) tensors, the (B, L) keys right-padded to the longest L
    (on `device` when given)."""
    length = max(batch["tokens"].shape[1] for batch in batches)
    out = {}
    for key in batches[0]:
        parts = [batch[key] for batch in batches]
        if key in PAD_VALUES:
            parts = [nn.functional.pad(p, (0, length - p.shape[1]), value=PAD_VALUES[key]) for p in parts]
        out[key] = torch.stack(parts).to(device) if device is not None else torch.stack(parts)
    return out


class SeedEnsemble(nn.Module):
    """k members of one task module, each built after `seed_everything(seed)`, trained as one batched model.

    `build(seed)` returns a member (a task module with `forward(batch)` and `loss(logits, targets)`); it is
    called once per seed, right after the seed is set, as a solo run builds its model. See the module docstring
    for the API and the numerics.
    """

    def __init__(self, build: Callable[[int], nn.Module], seeds: Sequence[int], device: torch.device | str = "cpu"):
        super().__init__()
        if len(set(seeds)) != len(seeds) or not seeds:
            raise ConfigError(f"an ensemble needs distinct seeds, got {list(seeds)}")
        self.seeds = list(seeds)
        members = []
        for seed in self.seeds:
            seed_everything(seed, verbose=False)
            members.append(build(seed).to(device))  # initialised on the CPU as a solo run, then moved
            if len(members) == 1 and hasattr(members[0], "arch"):
                check_ensemble_encoding(members[0].arch.layer_encodings)
        self.template = copy.deepcopy(members[0])  # runs every member's forward (its own weights swapped in)
        self._members = members  # not submodules: their weights live in the stack below
        params, buffers = stack_module_state(members)
        persistent = set(members[0].state_dict())  # torchmetrics' states and position tables are not saved
        self.params = {name: nn.Parameter(p.detach()) for name, p in params.items()}
        self.buffers_ = {name: b for name, b in buffers.items() if name in persistent}
        self.frozen = torch.zeros(len(seeds), dtype=torch.bool)
        self._kept: dict[int, dict[str, Tensor]] = {}  # a frozen member's parameters, restored after every step
        self.optimizer = self.schedule = None
        self.gradient_clip_val = None

    @property
    def k(self) -> int:
        return len(self.seeds)

    def forward(self, batches: dict[str, Tensor]) -> Tensor:
        """Logits (k, B, L, V) of each member on its own batch (`stack_batches`)."""
        return self._vmapped(lambda state, batch: functional_call(self.template, state, (batch,)))(batches)

    def losses(self, batches: dict[str, Tensor]) -> Tensor:
        """(k,) each member's loss on its own batch."""

        def one(state, batch):
            logits = functional_call(self.template, state, (batch,))
            return self.template.loss(logits, batch["targets"])

        return self._vmapped(one)(batches)

    def _vmapped(self, fn):
        state = {**self.params, **self.buffers_}
        randomness = "different" if self.template.training else "error"

        def run(batches):
            with sdpa_kernel(SDPBackend.MATH):  # vmap's SDPA would take a kernel that cannot learn a mask
                return torch.vmap(fn, randomness=randomness)(state, batches)

        return run

    def train(self, mode: bool = True):
        self.template.train(mode)
        return super().train(mode)

    def configure_optimizer(self, lr: float, weight_decay: float, warmup_steps: int, lr_decay: str,
                            total_steps: float, gradient_clip_val: float | None = None) -> None:  # fmt: skip
        """k AdamWs with `adamw_with_schedule`'s groups and schedule, as one AdamW over the stacked weights."""
        params = [p for p in self.params.values() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() - 1 >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() - 1 < 2], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98))
        factor = lr_factor(lr_decay, warmup_steps, total_steps)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)
        self.gradient_clip_val = gradient_clip_val

    def train_step(self, batches: dict[str, Tensor]) -> Tensor:
        """One training step of every member on its own batch; returns the (k,) losses (before the step)."""
        if self.optimizer is None:
            raise ConfigError("configure_optimizer before train_step")
        self.optimizer.zero_grad(set_to_none=True)
        losses = self.losses(batches)
        losses.sum().backward()  # member i's loss reaches only member i's slice of each stacked parameter
        if self.gradient_clip_val is not None:
            self.clip_gradients(self.gradient_clip_val)
        self.optimizer.step()
        self.schedule.step()
        self._restore_frozen()
        return losses.detach()

    def clip_gradients(self, max_norm: float) -> Tensor:
        """Each member's gradients scaled to a 2-norm of at most `max_norm` (torch's clip_grad_norm_ per member,
        what Lightning's gradient_clip_val does to a solo run); returns the (k,) norms before clipping."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads]).norm(dim=0)  # (k,)
        scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
        return norms

    def freeze(self, member: int) -> None:
        """Stop training member `member` (its early stop): its weights stay as they are now, the others go on."""
        self.frozen[member] = True
        self._kept[member] = {name: p.detach()[member].clone() for name, p in self.params.items()}

    def _restore_frozen(self) -> None:
        with torch.no_grad():
            for member, kept in self._kept.items():
                for name, p in self.params.items():
                    p[member] = kept[name]

    def member_training_state(self, member: int) -> dict:
        """What member `member` needs to go on training elsewhere (its own resumed run, or another ensemble): its
        AdamW moments and step count per parameter name, and the schedule's state (shared: one step count)."""
        names = {id(p): name for name, p in self.params.items()}
        moments = {}
        for p, state in self.optimizer.state.items():
            moments[names[id(p)]] = {k: (v[member].clone() if k != "step" else v.clone()) for k, v in state.items()}
        return {"optimizer": moments, "schedule": self.schedule.state_dict()}

    def load_member_training_state(self, member: int, weights: dict[str, Tensor], training: dict) -> None:
        """Member `member` continues a run saved by `member_training_state` (all members resume at one step):
        its weights, its AdamW moments and the schedule at that step."""
        with torch.no_grad():
            for name, value in weights.items():
                target = self.params.get(name, self.buffers_.get(name))
                if target is not None:
                    target[member] = value
        for name, saved in training["optimizer"].items():
            p = self.params[name]
            state = self.optimizer.state[p]
            for key, value in saved.items():
                if key == "step":
                    state["step"] = value.clone()
                else:
                    state.setdefault(key, torch.zeros_like(p, memory_format=torch.preserve_format))[member] = value
        self.schedule.load_state_dict(training["schedule"])
        for group, lr in zip(self.optimizer.param_groups, self.schedule.get_last_lr(), strict=True):
            group["lr"] = lr

    def member_state(self, member: int) -> dict[str, Tensor]:
        """Member `member`'s parameters and persistent buffers, keyed as its own module's state_dict."""
        state = {name: p.detach()[member] for name, p in self.params.items()}
        return state | {name: b[member] for name, b in self.buffers_.items()}

    def member(self, member: int) -> nn.Module:
        """Member `member` as an ordinary module holding its current weights (for evaluation, checkpoints)."""
        module = self._members[member]
        with torch.no_grad():
            for name, value in self.member_state(member).items():
                target = module.get_parameter(name) if name in self.params else module.get_buffer(name)
                target.copy_(value)
        return module
