"""The Chomsky-hierarchy config (Ruoss et al. 2023's encoder protocol) and bad input through cli.py: an option a
variant does not have, a task option out of range, a causal-only encoding in an encoder -> one line, exit 2.

Claims of docs/tasks.md covered here:
- "Chomsky hierarchy, Ruoss et al. 2023's protocol (configs/chomsky.yaml, sweeps/chomsky.yaml): encoder (causal:
  false), 5 layers, width 64, 8 heads, train lengths 1-40, evaluation every 20 lengths up to 500; score =
  val/tok_acc_ood ...; the config defaults to 10,000 steps": test_config_is_the_ruoss_protocol, test_a_tiny_chomsky_run
- "Task options with --data.task_options, e.g. '{modulus: 7}' ...; a missing or out-of-range one is a one-line
  error"; xpos, cope, fox are causal only: test_bad_input_is_one_line_exit_2
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "cli.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_config_is_the_ruoss_protocol():
    from datamodules.synthetic import SyntheticDataModule
    from pe_sweeps.sweep.sweep_file import load_sweep, metric_names

    config = yaml.safe_load((ROOT / "configs" / "chomsky.yaml").read_text())
    model, data = config["model"]["init_args"], config["data"]["init_args"]
    assert model["causal"] is False and model["arch"]["depth"] == 5 and model["arch"]["dim"] == 64
    assert model["arch"]["num_heads"] == 8
    assert data["min_len"] == 1 and data["train_max_len"] == 40 and data["eval_max_len"] == 500
    assert config["trainer"]["max_steps"] == 10000 and data["batch_size"] == 128
    lengths = SyntheticDataModule(**{k: v for k, v in data.items() if k != "task"}, causal=False).eval_lengths
    assert lengths == sorted({*range(1, 501, 20), 40, 500})  # every 20 lengths up to 500 (and the boundary)
    assert metric_names(load_sweep(ROOT / "sweeps" / "chomsky.yaml")) == ["val/tok_acc_ood"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--data.task=modular_arithmetic", "--data.task_options={modulus: 1}"], "needs modulus >= 2, got 1"),
        (["--data.task=parity_check", "--data.task_options={modulus: 3}"], "task 'parity_check' has no option"),
        (
            ["--model.arch.encoding=sandwich", "--model.arch.encoding_options={yarn_factor: 2.0}"],
            "has no option 'yarn_factor'",
        ),
        (
            ["--model.arch.encoding=alibi", "--model.arch.encoding_options={heads: 9}"],
            "alibi heads must be in [1, num_heads=8]",
        ),
        (["--model.arch.encoding=cope"], "encoding 'cope' is causal-only"),
        (["--model.arch.encoding=fox"], "encoding 'fox' is causal-only"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args, expected, capsys, monkeypatch):
    from pe_sweeps.cli import cli_main

    monkeypatch.setenv("WANDB_MODE", "disabled")
    with pytest.raises(SystemExit) as exit_:  # in this process: cli_main is what `python cli.py` runs
        cli_main(["fit", "--config=configs/chomsky.yaml", f"--run.out_dir={tmp_path}", *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err[-2000:]
    last = err.strip().splitlines()[-1]  # before it at most Lightning's "Seed set to 0"
    assert last.startswith("error: ") and expected in last and "Traceback" not in err


@pytest.mark.slow
def test_a_tiny_chomsky_run(tmp_path):
    result = run_cli(
        "fit", "--config=configs/chomsky.yaml", f"--run.out_dir={tmp_path}", "--data.task=binary_addition",
        "--model.arch.encoding=alibi", "--model.arch.depth=1", "--data.train_max_len=6", "--data.eval_max_len=10",
        "--data.eval_length_stride=2", "--data.train_size=64", "--data.eval_per_length=4",
        "--data.eval_per_train_length=4", "--data.batch_size=16",
        "--trainer.max_steps=2", "--trainer.val_check_interval=2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    from pe_sweeps.runs.records import load_records

    (record,) = load_records(tmp_path)
    assert record.status == "finished" and record.task == "binary_addition"
    assert 0.0 <= record.final["val/tok_acc_ood"] <= 1.0 and "val/tok_acc_len_10" in record.final
