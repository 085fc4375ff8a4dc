"""Every config preset parses with cli.py (alone when it is complete, on top of synthetic.yaml when it
is an overlay), so a broken YAML key is caught before anyone trains on it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_parses(path):
    config = yaml.safe_load(path.read_text())
    complete = "class_path" in (config.get("model") or {})
    stack = [f"--config={path}"] if complete else ["--config=configs/synthetic.yaml", f"--config={path}"]
    result = subprocess.run(
        [sys.executable, "cli.py", "fit", *stack, "--print_config"], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    resolved = yaml.safe_load(result.stdout)
    assert resolved["model"]["class_path"] and resolved["data"]["class_path"]
