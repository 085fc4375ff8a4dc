"""Shared fixtures: a tiny CPU config that trains in seconds and writes under tmp_path."""

import pytest
import torch

TINY = [
    "--config=configs/synthetic.yaml",
    "--model.arch.dim=32",
    "--model.arch.depth=1",
    "--model.arch.num_heads=4",
    "--data.train_max_len=4",
    "--data.eval_max_len=8",
    "--data.eval_length_stride=1",
    "--data.train_size=256",
    "--data.eval_per_length=8",
    "--data.eval_per_train_length=8",
    "--data.batch_size=32",
    "--trainer.max_steps=4",
    "--trainer.val_check_interval=2",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


@pytest.fixture
def tiny_fit_args(tmp_path, monkeypatch):
    """`fit` arguments for a seconds-long run under tmp_path, W&B disabled unless a test re-enables it."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return ["fit", *TINY, f"--run.out_dir={tmp_path}"]


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """Test tensors are tiny: one intra-op thread is several times faster than many on a busy CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
