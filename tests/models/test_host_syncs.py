"""No host sync in a training step (issue 26, finding 2): nothing reads a tensor's value on the host (on CUDA
each such read waits for the GPU) while the synthetic task module trains, while DeBERTa's content terms are
built, and a diverged loss still stops the run with one line naming its first non-finite step."""

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from helpers import load_module

from lightning_modules.arch import ArchConfig
from lightning_modules.synthetic_model import SyntheticTaskModel
from lightning_modules.transformer import Transformer
from pe_core.errors import DivergedError

ROOT = Path(__file__).resolve().parents[2]


def host_reads():
    """benchmarks/step_overhead.py's counter of host reads by call site (one definition for both)."""
    return load_module("benchmarks/step_overhead.py").HostReads()


def tiny_fit(tmp_path, max_steps: int, callbacks=(), log_every_n_steps: int = 50, model=None, **trainer):
    from datamodules.synthetic import SyntheticDataModule
    from pe_sweeps.runs.callbacks import LogLearningRate, StepProgressBar
    from pe_sweeps.runs.record_writer import RecordWriter

    data = SyntheticDataModule(task="copy", train_max_len=4, eval_max_len=8, train_size=128, eval_per_length=4,
                               batch_size=8)  # fmt: skip
    data.setup("fit")
    arch = ArchConfig("rope", dim=16, depth=1, num_heads=2, vocab_size=data.vocab_size, max_length=data.max_seq_len)
    model = model or SyntheticTaskModel(arch)
    ours = [RecordWriter(tmp_path, {"name": "t"}, {}), StepProgressBar(), LogLearningRate()]
    trainer = pl.Trainer(
        max_steps=max_steps, accelerator="cpu", devices=1, logger=pl.loggers.CSVLogger(tmp_path),
        callbacks=[*callbacks, *ours], log_every_n_steps=log_every_n_steps, limit_val_batches=0,
        num_sanity_val_steps=0, enable_checkpointing=False, enable_model_summary=False, default_root_dir=tmp_path,
        **trainer,
    )  # fmt: skip
    trainer.fit(model, datamodule=data)
    return trainer


def test_no_host_reads_inside_synthetic_training_steps(tmp_path):
    """Steps 1-4 of a fit with our callbacks (record, progress bar, learning rate) and a logger: forward, loss,
    backward, AdamW, the schedule and every hook in between read nothing on the host."""
    reads = host_reads()

    class Window(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            reads.counting = 1 <= trainer.global_step < 5

    with reads.patched():
        tiny_fit(tmp_path, max_steps=6, callbacks=[Window()])
    assert reads.total() == 0, reads.sites


@pytest.mark.parametrize("every", [50, 2])
def test_a_diverged_loss_stops_at_the_next_check_naming_its_first_step(tmp_path, every):
    """The loss turns NaN at step 3: the run stops at the next check (the end of training with checks every 50
    steps, step 4 with checks every 2) with one line naming step 3 and what to try."""
    arch = ArchConfig("rope", dim=16, depth=1, num_heads=2, vocab_size=32, max_length=32)

    class Diverging(SyntheticTaskModel):
        def loss(self, logits, targets):
            loss = super().loss(logits, targets)
            return loss * float("nan") if self.training and self.global_step >= 3 else loss

    model = Diverging(arch, lr=0.5)
    with pytest.raises(DivergedError) as error:
        tiny_fit(tmp_path, max_steps=8, log_every_n_steps=every, model=model)
    message = str(error.value)
    assert (
        "\n" not in message and message.startswith("train/loss is nan at step 3;") and "--model.lr (now 0.5)" in message
    )
    assert model.trainer.global_step == (8 if every == 50 else 4)


def test_deberta_content_terms_read_nothing_on_the_host_and_match_all_rows():
    """DeBERTa's used table rows come from the reserved length on the host (they were two reads per layer)."""
    torch.manual_seed(0)
    model = Transformer(ArchConfig("deberta", dim=16, depth=3, num_heads=2, vocab_size=12, max_length=64), causal=True)
    model(torch.randint(0, 12, (2, 7)))  # the host copy of the table's rows is built once
    tokens = torch.randint(0, 12, (2, 20))
    reads = host_reads()
    with reads.patched():
        reads.counting = True
        out = model(tokens)
        reads.counting = False
    assert reads.total() == 0, reads.sites
    encoding = model.encoding
    all_rows = lambda positions: (encoding.relative_index(positions), 0, 2 * encoding.span)  # noqa: E731
    encoding.used_rows = all_rows
    torch.testing.assert_close(out, model(tokens))
    assert encoding.row_range(20)[1] - encoding.row_range(20)[0] < 2 * encoding.span  # fewer rows than all
