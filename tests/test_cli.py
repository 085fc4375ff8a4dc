"""`cli.py fit` end to end on the tiny config: every encoding trains, records are written, bad input
is one clear line, runs are reproducible."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli import cli_main
from datamodules.synthetic import TASKS
from lightning_modules.encodings import ENCODINGS
from tracking.records import load_records

ROOT = Path(__file__).resolve().parents[1]


def fit(args: list[str]) -> dict:
    cli_main(args)
    out_dir = Path(next(a.split("=", 1)[1] for a in args if a.startswith("--run.out_dir=")))
    (record,) = load_records(out_dir)
    return record


@pytest.mark.slow  # trains a model or starts a process
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_fit_every_encoding(tiny_fit_args, encoding, causal):
    if ENCODINGS[encoding].causal_only and not causal:
        pytest.skip("causal-only encoding")
    record = fit([*tiny_fit_args, f"--model.arch.encoding={encoding}", f"--model.causal={causal}"])
    assert record["status"] == "finished"
    assert record["encoding"] == encoding and record["task"] == "copy"
    assert record["name"] == f"copy-{encoding}-s0" and record["group"] == f"copy/{encoding}"
    assert record["config"]["model"]["init_args"]["causal"] is causal
    assert record["config"]["data"]["init_args"]["causal"] is causal  # linked
    for key in ("val/acc", "val/acc_ood", "val/loss", "val/acc_len_4", "val/acc_len_8", "val/tok_acc_len_8"):
        assert key in record["final"], key
    assert len(record["history"]) == 2


@pytest.mark.slow  # trains a model or starts a process
@pytest.mark.parametrize("task", TASKS)
def test_fit_every_task(tiny_fit_args, task):
    record = fit([*tiny_fit_args, f"--data.task={task}", "--data.num_symbols=12", "--model.arch.encoding=alibi"])
    assert record["status"] == "finished" and record["task"] == task
    assert 0.0 <= record["final"]["val/acc"] <= 1.0


@pytest.mark.slow  # trains a model or starts a process
def test_same_seed_same_metrics(tiny_fit_args, tmp_path):
    first = fit(tiny_fit_args)
    second = fit([*tiny_fit_args[:-1], f"--run.out_dir={tmp_path / 'again'}"])
    assert first["final"] == second["final"]
    third = fit([*tiny_fit_args[:-1], f"--run.out_dir={tmp_path / 'other'}", "--seed_everything=1"])
    assert third["final"]["val/loss"] != first["final"]["val/loss"]


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "cli.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.slow  # trains a model or starts a process
def test_wandb_offline_without_key(tiny_fit_args, tmp_path):
    """No key, no WANDB_MODE: the run logs offline (in a fresh process: W&B keeps global state)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    result = subprocess.run(
        [sys.executable, "cli.py", *tiny_fit_args], cwd=ROOT, capture_output=True, text=True,
        env={**env, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (record,) = load_records(tmp_path)
    run_dir = Path(record["run_dir"])
    (offline,) = list((run_dir / "wandb").glob("offline-run-*"))
    assert any(offline.glob("*.wandb"))
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["init_args"]["arch"]["encoding"] == "rope"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--model.arch.encoding=nope"], "unknown encoding 'nope'; choose one of: none, learned"),
        (["--data.task=nope"], "unknown task 'nope'; choose one of: copy, reverse"),
        (["--model.arch.encoding_options={bogus: 1}"], "encoding 'rope' has no option 'bogus'; its options: base"),
    ],
)
@pytest.mark.slow  # trains a model or starts a process
def test_bad_names_are_one_line(tmp_path, args, expected):
    result = run_cli("fit", "--config=configs/synthetic.yaml", f"--run.out_dir={tmp_path}", *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
    assert expected in result.stderr


def test_learned_table_too_short_is_clear(tiny_fit_args):
    from errors import ConfigError
    from lightning_modules.arch import ArchConfig
    from lightning_modules.transformer import Transformer

    model = Transformer(ArchConfig("learned", dim=16, num_heads=2, vocab_size=8, max_length=4))
    import torch

    with pytest.raises(ConfigError, match="serves positions < 4"):
        model(torch.zeros(1, 6, dtype=torch.long))


@pytest.mark.slow  # trains a model or starts a process
def test_config_saved_with_record(tiny_fit_args):
    record = fit(tiny_fit_args)
    saved = json.loads((Path(record["run_dir"]) / "record.json").read_text())
    assert saved["config"]["seed_everything"] == 0


@pytest.mark.slow
def test_ddp_fit_on_two_cpu_processes(tiny_fit_args, tmp_path):
    """gloo DDP with 2 processes: one run directory, one record; then the trained checkpoint validated by 2
    processes and by 1 evaluates the same number of examples with the same metrics (reduced across ranks)."""
    result = run_cli(*tiny_fit_args, "--trainer.devices=2", "--trainer.strategy=ddp", "--model.arch.encoding=alibi")
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = load_records(tmp_path)
    assert record["status"] == "finished" and str(record["config"]["trainer"]["devices"]) == "2"
    assert len(record["history"]) == 2
    (checkpoint,) = Path(record["run_dir"]).glob("checkpoints/last.ckpt")
    finals = {}
    for devices in (1, 2):
        out = tmp_path / f"validate-{devices}"
        args = [a.replace(f"--run.out_dir={tmp_path}", f"--run.out_dir={out}") for a in tiny_fit_args]
        args = ["validate", *args[1:], "--model.arch.encoding=alibi", f"--ckpt_path={checkpoint}"]
        result = run_cli(
            *args, f"--trainer.devices={devices}", "--trainer.strategy=" + ("ddp" if devices > 1 else "auto")
        )
        assert result.returncode == 0, result.stderr[-3000:]
        (validated,) = load_records(out)
        finals[devices] = {k: v for k, v in validated["final"].items() if k.startswith("val/")}
    assert finals[1]["val/examples"] == 8 * 8  # eval_max_len 8 x eval_per_length 8: none dropped or repeated
    assert finals[2].keys() == finals[1].keys()
    for key, value in finals[1].items():
        assert finals[2][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
