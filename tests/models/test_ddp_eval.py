"""Runs tests/ddp_eval_cases.py (validation metrics identical with 1, 2 or 3 gloo processes) in a fresh
interpreter: its ranks are forked (Lightning's ddp_fork, fast), and a fork deadlocks when an earlier test in the
same pytest worker left threads running (seen after tests/models/test_flex.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ddp_evaluation_cases_in_a_fresh_interpreter():
    cases = ROOT / "tests" / "ddp_eval_cases.py"
    command = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-W", "ignore", str(cases)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
