"""A fit's checkpoint: `checkpoints/last.ckpt` holds the model at the end of training, and the run record says
which step each checkpoint holds; a fit resumed from it continues the data where it stopped.

Claims of docs/training.md covered here:
- "checkpoints/last.ckpt is the trained model: saved at each validation and at the end of training; the record's
  `checkpoints` says which step it holds": test_last_checkpoint_holds_the_final_step
- "fit --ckpt_path=<run>/checkpoints/last.ckpt continues the run where it stopped: the same batches, in the same
  order, as a run never stopped": test_a_resumed_fit_sees_the_batches_of_an_uninterrupted_one
"""

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from batch_log import read_batch_log
from conftest import TINY

from pe_sweeps.cli import cli_main
from pe_sweeps.layout import FAULT_ENV
from pe_sweeps.runs.records import RunRecord, load_records

ROOT = Path(__file__).resolve().parents[2]


def fit(*args: str) -> RunRecord:
    """`cli.py fit` on the tiny config in this process; the one record under --run.out_dir."""
    cli_main(["fit", *TINY, *args])
    out_dir = Path(next(a.split("=", 1)[1] for a in args if a.startswith("--run.out_dir=")))
    (record,) = load_records(out_dir)
    return record


def batch_log(path: Path) -> str:
    return f'--trainer.callbacks=[{{"class_path": "batch_log.BatchLog", "init_args": {{"path": "{path}"}}}}]'


@pytest.mark.slow  # trains a model
@pytest.mark.parametrize("max_steps, every", [(7, 5), (3, 5)], ids=["after-the-last-validation", "before-the-first"])
def test_last_checkpoint_holds_the_final_step(max_steps, every, tmp_path, monkeypatch):
    """Steps trained after the last validation are saved (they were thrown away: last.ckpt held step 5 of 7), and
    a run shorter than one validation interval leaves its checkpoint (it left none)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    record = fit(f"--trainer.max_steps={max_steps}", f"--trainer.val_check_interval={every}",
                 f"--run.out_dir={tmp_path}")  # fmt: skip
    last = Path(record.run_dir) / "checkpoints" / "last.ckpt"
    assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"]
    assert torch.load(last, weights_only=False)["global_step"] == max_steps
    assert record.checkpoints == {"last": {"path": str(last.resolve()), "step": max_steps}}
    saved = json.loads((Path(record.run_dir) / "record.json").read_text())
    assert saved["checkpoints"]["last"]["step"] == max_steps and record.global_step == max_steps


@pytest.mark.slow  # trains a model four times, once in a process of its own
def test_a_resumed_fit_sees_the_batches_of_an_uninterrupted_one(tmp_path, monkeypatch):
    """12 steps straight (validation every 2, 8 batches an epoch) vs the same fit killed once its step-2
    validation checkpoint is written (a sweep's retry resumes such a one), resumed to step 7 (its final checkpoint,
    mid-epoch), then resumed again to 12: the same batch at every step (a resume started the epoch's data again
    from its first batch), the same validations and final metrics, and neither resume prints Lightning's
    warnings (a dataloader that is not resumable; the run's own checkpoint folder not empty)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    straight = fit("--trainer.max_steps=12", batch_log(tmp_path / "straight.jsonl"), f"--run.out_dir={tmp_path / 's'}")
    out_dir = f"--run.out_dir={tmp_path / 'split'}"
    command = ["fit", *TINY, "--trainer.max_steps=12", batch_log(tmp_path / "killed.jsonl"), out_dir]
    killed = subprocess.run(
        [sys.executable, "cli.py", *command], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, FAULT_ENV: "step:after_checkpoint", "PYTHONPATH": str(ROOT / "tests")},
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (run_dir,) = (tmp_path / "split" / "runs").iterdir()
    checkpoint = f"--ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for steps in (7, 12):
            resumed = fit(f"--trainer.max_steps={steps}", checkpoint, batch_log(tmp_path / "resumed.jsonl"), out_dir)
            assert resumed.checkpoints["last"]["step"] == steps
    messages = "\n".join(str(w.message) for w in caught)
    assert "not resumable" not in messages and "exists and is not empty" not in messages
    assert Path(resumed.run_dir) == run_dir and [r["step"] for r in resumed.resumes] == [2, 7]
    batches = [row for row in read_batch_log(tmp_path / "killed.jsonl") if row[0] <= 2]
    batches += read_batch_log(tmp_path / "resumed.jsonl")
    assert batches == read_batch_log(tmp_path / "straight.jsonl") and [s for s, _ in batches] == list(range(1, 13))
    assert [h["step"] for h in resumed.history] == [h["step"] for h in straight.history] == [2, 4, 6, 8, 10, 12]
    assert resumed.final["val/loss"] == pytest.approx(straight.final["val/loss"], rel=1e-5)
