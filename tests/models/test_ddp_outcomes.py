"""Runs tests/ddp_outcome_cases.py (per-example outcomes of the causal LM, masked LM and translation gathered from 2
gloo processes equal the 1-process ones, every id once) in a fresh interpreter: its ranks are forked (Lightning's
ddp_fork), and a fork deadlocks when an earlier test in the same pytest worker left threads running."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ddp_outcome_cases_in_a_fresh_interpreter():
    cases = ROOT / "tests" / "ddp_outcome_cases.py"
    command = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-W", "ignore", str(cases)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
