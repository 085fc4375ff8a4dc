"""Validation under DDP counts every example once and weights every loss by its tokens, so each logged
validation metric is the same with 1, 2 or 3 processes (gloo on CPU, Lightning's ddp_fork).

Claim of docs/tasks.md covered here: "validation metrics do not depend on the number of processes".
"""

import copy
import warnings

import pytest
import pytorch_lightning as pl
import torch

from datamodules.synthetic import SyntheticDataModule
from lightning_modules.arch import ArchConfig
from lightning_modules.synthetic_model import SyntheticTaskModel

pytestmark = pytest.mark.slow


def tiny_data() -> SyntheticDataModule:
    # 3 lengths x 7 + 2 lengths x 5 = 31 validation examples: divisible by neither 2 nor 3 (a padding sampler
    # repeats some), in batches of 5 whose sizes differ by process (a mean of batch means depends on them), and
    # so do their numbers (16 + 15 examples: 4 and 3 batches; 11 + 10 + 10: 3, 2, 2)
    return SyntheticDataModule(task="copy", min_len=1, train_max_len=3, eval_max_len=5, num_symbols=4, train_size=64,
                               eval_per_length=5, eval_per_train_length=7, batch_size=5, seed=0)  # fmt: skip


def trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, **kwargs)  # fmt: skip


def tiny_model() -> SyntheticTaskModel:
    pl.seed_everything(0)
    data = tiny_data()
    arch = ArchConfig(encoding="rope", dim=16, depth=1, num_heads=2, ffn_mult=2, vocab_size=data.vocab_size,
                      max_length=data.max_seq_len)  # fmt: skip
    return SyntheticTaskModel(arch=arch, lr=3e-3)


@pytest.fixture(scope="module")
def trained():
    """A tiny model trained for a few steps, so accuracies are neither all 0 nor all 1."""
    model = tiny_model()
    trainer(max_steps=30, limit_val_batches=0).fit(model, datamodule=tiny_data())
    return model


def validate(model: SyntheticTaskModel, devices: int | None) -> dict[str, float]:
    """The logged validation metrics of one `trainer.validate`: one plain process, or `devices` DDP ones."""
    ddp = {} if devices is None else {"strategy": "ddp_fork", "devices": devices}
    # a copy: a plain validation leaves inference-mode tensors in the metrics, which gloo's no_grad cannot update
    results = trainer(**ddp).validate(copy.deepcopy(model), datamodule=tiny_data(), verbose=False)
    return {k: float(v) for k, v in results[0].items()}


def test_validation_metrics_do_not_depend_on_the_number_of_processes(trained):
    reference = validate(trained, None)
    assert reference["val/examples"] == 31
    assert 0 < reference["val/tok_acc"] < 1 and reference["val/loss"] > 0
    for n, k in ((1, 7), (3, 7), (4, 5), (5, 5)):  # lengths 1-3 in distribution, 4-5 beyond
        p = reference[f"val/acc_len_{n}"]
        assert reference[f"val/acc_se_len_{n}"] == pytest.approx((p * (1 - p) / k) ** 0.5, abs=1e-6)
    for devices in (1, 2, 3):
        got = validate(trained, devices)
        assert got.keys() == reference.keys(), devices
        for key, value in reference.items():
            assert got[key] == pytest.approx(value, abs=1e-6), (devices, key, got[key], value)


def test_validation_loss_is_the_token_weighted_mean(trained):
    """val/loss is the mean over every answer token of the lengths <= train_max_len, not a mean of batches."""
    data = tiny_data()
    data.setup("validate")
    losses, tokens = [], 0
    with torch.no_grad():
        for batch in data.val_dataloader():
            inside = batch["length"] <= data.train_max_len
            targets = batch["targets"][inside]
            logits = trained(batch)[inside]
            losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum"))
            tokens += int((targets != -100).sum())
    expected = float(sum(losses)) / tokens
    assert validate(trained, None)["val/loss"] == pytest.approx(expected, abs=1e-6)


def test_validation_during_a_ddp_fit_is_the_single_process_one():
    """A 2-process fit validates through DDP's forward, with 4 batches on one process and 3 on the other: its
    last validation logs what one process logs validating the weights it trained (no hang, nothing counted
    twice)."""
    model = tiny_model()
    fit = trainer(strategy="ddp_fork", devices=2, max_steps=4, val_check_interval=4)
    fit.fit(model, datamodule=tiny_data())
    during = {k: float(v) for k, v in fit.callback_metrics.items() if k.startswith("val/")}
    after = validate(model, None)
    assert during.keys() == after.keys() and during["val/examples"] == 31
    for key, value in after.items():
        assert during[key] == pytest.approx(value, abs=1e-6), (key, during[key], value)


def test_evaluation_logs_raise_no_sync_dist_warning(trained):
    """Under DDP Lightning warned once per logged metric (one per length: a flood) that `sync_dist=True` is
    recommended; the values are already reduced by torchmetrics, and say so (issue 29.6). One DDP process is
    enough: the warning looks only at whether torch.distributed is initialised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer(strategy="ddp", devices=1).validate(copy.deepcopy(trained), datamodule=tiny_data(), verbose=False)
    flood = [str(w.message) for w in caught if "sync_dist" in str(w.message)]
    assert not flood, flood[:3]
