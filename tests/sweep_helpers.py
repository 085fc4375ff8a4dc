"""Sweep helpers shared by the sweep and launcher tests: a grid of fake trials, and how many grid points a study
completed once, twice or never."""

from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

FAKE = Path(__file__).resolve().parent / "fake_fit.py"


def fake_sweep(tmp_path: Path, points: int, name: str = "f") -> Path:
    """A grid of `points` fake trials (tests/fake_fit.py: about a second each, no training)."""
    sweep = {
        "program": str(FAKE), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"x": {"values": list(range(1, points + 1))}},
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
    }  # fmt: skip
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def counts(study: optuna.Study, points: int) -> dict:
    complete = [t.params["x"] for t in study.get_trials(states=(TrialState.COMPLETE,))]
    per_point = {x: complete.count(x) for x in range(1, points + 1)}
    return {
        "points": points,
        "duplicates": sum(max(0, n - 1) for n in per_point.values()),
        "lost": sum(n == 0 for n in per_point.values()),
    }
