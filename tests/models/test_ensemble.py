"""Seed ensembles (lightning_modules/ensemble.py): k members trained as one batched model equal k solo runs.

Tolerance: a member's loss curve equals its solo run's to 1e-5 (absolute, on losses near 3) and its final
validation loss to 1e-4. Not bit for bit: under vmap the matmuls run batched (and on SDPA's math kernel), and the
members' batches are padded to one length, so float32 sums reassociate (differences of ~5e-7 at the first step);
AdamW's g / sqrt(v) then magnifies the rounding of near-zero gradients a little over the steps.
"""

import pytest
import torch
from pytorch_lightning import seed_everything

from datamodules.synthetic import SyntheticDataModule
from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS
from lightning_modules.ensemble import NOT_VMAPPABLE, SeedEnsemble, check_ensemble_encoding, stack_batches
from lightning_modules.optim import adamw_with_schedule
from lightning_modules.synthetic_model import SyntheticTaskModel
from pe_core.errors import ConfigError

SEEDS, STEPS, LR = (0, 1, 2), 3, 1e-3
LOSS_TOL, VAL_TOL = 1e-5, 1e-4
VMAPPABLE = [name for name in ENCODINGS if name not in NOT_VMAPPABLE]


def data(seed: int) -> SyntheticDataModule:
    module = SyntheticDataModule(task="copy", train_max_len=8, train_size=32, batch_size=4, seed=seed,
                                 num_workers=0, eval_per_length=2)  # fmt: skip
    module.setup("fit")
    return module


def builder(encoding: str, module: SyntheticDataModule):
    arch = ArchConfig(encoding=encoding, dim=16, depth=1, num_heads=2, vocab_size=module.vocab_size,
                      max_length=module.max_seq_len)  # fmt: skip
    return lambda seed: SyntheticTaskModel(arch=arch, lr=LR)


def solo_run(encoding: str, seed: int, clip: float | None = None) -> tuple[list[float], SyntheticTaskModel]:
    """What a solo run does (Lightning's loop: zero_grad, backward, clip, AdamW step, schedule step)."""
    module = data(seed)
    seed_everything(seed, verbose=False)
    model = builder(encoding, module)(seed)
    config = adamw_with_schedule(model, LR, 0.0, 0, "cosine", STEPS)
    optimizer, schedule = config["optimizer"], config["lr_scheduler"]["scheduler"]
    losses = []
    for _, batch in zip(range(STEPS), module.train_dataloader()):
        loss = model.loss(model(batch), batch["targets"])
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses, model


def ensemble_run(encoding: str, clip: float | None = None, freeze_after: dict | None = None):
    modules = [data(seed) for seed in SEEDS]
    ensemble = SeedEnsemble(builder(encoding, modules[0]), SEEDS)
    ensemble.configure_optimizer(LR, 0.0, 0, "cosine", STEPS, gradient_clip_val=clip)
    loaders = [iter(module.train_dataloader()) for module in modules]
    losses = []
    for step in range(STEPS):
        losses.append(ensemble.train_step(stack_batches([next(loader) for loader in loaders])))
        for member, after in (freeze_after or {}).items():
            if step + 1 == after:
                ensemble.freeze(member)
    return torch.stack(losses), ensemble, modules


def val_loss(model, module: SyntheticDataModule) -> float:
    model.eval()
    batch = next(iter(module.val_dataloader()))
    with torch.no_grad():
        return model.loss(model(batch), batch["targets"]).item()


@pytest.mark.slow
@pytest.mark.parametrize("encoding", VMAPPABLE)
def test_members_equal_solo_runs(encoding):
    losses, ensemble, modules = ensemble_run(encoding)
    for i, seed in enumerate(SEEDS):
        solo_losses, solo = solo_run(encoding, seed)
        torch.testing.assert_close(losses[:, i], torch.tensor(solo_losses), atol=LOSS_TOL, rtol=0)
        member = val_loss(ensemble.member(i), modules[i])
        assert abs(member - val_loss(solo, modules[i])) < VAL_TOL, (encoding, seed)


def test_members_start_bit_equal_to_solo_models():
    ensemble = SeedEnsemble(builder("rope", data(0)), SEEDS)
    for i, seed in enumerate(SEEDS):
        seed_everything(seed, verbose=False)
        solo = builder("rope", data(0))(seed)
        for name, value in solo.state_dict().items():
            assert torch.equal(ensemble.member_state(i)[name], value), (seed, name)


@pytest.mark.slow
def test_gradient_clipping_is_per_member():
    """A clip that binds: each member's gradients are clipped by its own norm, as a solo run's are."""
    losses, ensemble, modules = ensemble_run("rope", clip=0.05)
    for i, seed in enumerate(SEEDS):
        solo_losses, solo = solo_run("rope", seed, clip=0.05)
        torch.testing.assert_close(losses[:, i], torch.tensor(solo_losses), atol=LOSS_TOL, rtol=0)
        assert abs(val_loss(ensemble.member(i), modules[i]) - val_loss(solo, modules[i])) < VAL_TOL


@pytest.mark.slow
def test_a_frozen_member_keeps_its_weights_and_the_others_go_on():
    _, free, _ = ensemble_run("rope")
    _, ensemble, _ = ensemble_run("rope", freeze_after={1: 1})
    _, one_step, _ = ensemble_run("rope", freeze_after={0: 1, 1: 1, 2: 1})
    assert ensemble.frozen.tolist() == [False, True, False]
    for name in ensemble.params:
        assert torch.equal(ensemble.member_state(1)[name], one_step.member_state(1)[name])  # stopped at step 1
        assert torch.equal(ensemble.member_state(0)[name], free.member_state(0)[name])  # unaffected
        assert torch.equal(ensemble.member_state(2)[name], free.member_state(2)[name])


@pytest.mark.parametrize("encoding", sorted(NOT_VMAPPABLE))
def test_unbatchable_encodings_are_refused_in_one_line(encoding):
    with pytest.raises(ConfigError) as error:
        SeedEnsemble(builder(encoding, data(0)), SEEDS)
    message = str(error.value)
    assert "\n" not in message and encoding in message and NOT_VMAPPABLE[encoding] in message
    assert "rope" in message  # the encodings that work
    check_ensemble_encoding(["rope", "none"])  # a schedule of working ones passes


@pytest.mark.slow
@pytest.mark.parametrize("encoding", sorted(NOT_VMAPPABLE))
def test_refused_encodings_do_fail_under_vmap(encoding, monkeypatch):
    """The list is not stale: with the refusal lifted, a step of the ensemble does fail."""
    monkeypatch.setattr("lightning_modules.ensemble.NOT_VMAPPABLE", {})
    with pytest.raises(RuntimeError):
        ensemble_run(encoding)


def test_seeds_must_be_distinct():
    with pytest.raises(ConfigError, match="distinct seeds"):
        SeedEnsemble(builder("rope", data(0)), [1, 1])


@pytest.mark.slow
def test_member_equals_a_lightning_fit(tmp_path):
    """The reference loop above is what `Trainer.fit` does: a member's loss curve equals a real solo fit's."""
    import pytorch_lightning as pl

    class Losses(pl.Callback):
        def __init__(self):
            self.values = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.values.append(float(outputs["loss"]))

    losses, _, _ = ensemble_run("rope")
    seed = SEEDS[1]
    seed_everything(seed, verbose=False)
    module = data(seed)
    model, recorder = builder("rope", module)(seed), Losses()
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", logger=False, callbacks=[recorder], limit_val_batches=0,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, datamodule=module)
    torch.testing.assert_close(losses[:, 1], torch.tensor(recorder.values), atol=LOSS_TOL, rtol=0)
