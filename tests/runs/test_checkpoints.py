"""A fit's checkpoint: `checkpoints/last.ckpt` holds the model at the end of training, and the run record says
which step each checkpoint holds.

Claims of docs/training.md covered here:
- "checkpoints/last.ckpt is the trained model: saved at each validation and at the end of training; the record's
  `checkpoints` says which step it holds": test_last_checkpoint_holds_the_final_step
"""

import json
from pathlib import Path

import pytest
import torch
from conftest import TINY

from pe_sweeps.cli import cli_main
from pe_sweeps.runs.records import RunRecord, load_records


def fit(*args: str) -> RunRecord:
    """`cli.py fit` on the tiny config in this process; the one record under --run.out_dir."""
    cli_main(["fit", *TINY, *args])
    out_dir = Path(next(a.split("=", 1)[1] for a in args if a.startswith("--run.out_dir=")))
    (record,) = load_records(out_dir)
    return record


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
