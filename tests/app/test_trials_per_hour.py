"""benchmarks/trials_per_hour.py (issue 47.4) keeps running: its --quick smoke version times a tiny sweep on the
plain loop, our Trainer.fit path and a seed ensemble, and one encoding's ms/step, and writes its JSON and markdown.
Claims checked on what it writes: one row per path asked for, each with trials/hour from its own sweep time and its
speed-up relative to ours (ours: 1); the per-encoding row has both ms/step and their ratio; a path that is not one
of the benchmark's is refused in one line naming the choices."""

import json
from pathlib import Path

import pytest
from helpers import load_module

ROOT = Path(__file__).resolve().parents[2]


def benchmark():
    return load_module("benchmarks/trials_per_hour.py")


def test_unknown_path_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        benchmark().parse_args(["--paths", "plain,warp"])
    assert "unknown path 'warp'; choose from: plain, ours, compiled, compiled_step, ensemble" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_run_writes_every_path_and_the_encoding_table(tmp_path):
    benchmark().main(
        ["--quick", "--paths", "plain,ours,ensemble", "--encodings", "rope", "--clock", "cpu", "--out", str(tmp_path)]
    )
    report = json.loads((tmp_path / "trials_per_hour.json").read_text())
    rows = {row["path"]: row for row in report["sweep"]["rows"]}
    assert list(rows) == ["plain", "ours", "ensemble"] and report["sweep"]["trials"] == 4  # 2 seeds x 2 tasks
    for row in rows.values():
        assert row["status"] == "ok" and row["trials_per_hour"] == pytest.approx(
            3600 * 4 / row["seconds_each"][0], 0.01
        )
    assert rows["ours"]["speedup_vs_ours"] == 1
    (encoding,) = report["per_encoding"]
    assert encoding["encoding"] == "rope" and encoding["ratio"] == pytest.approx(
        encoding["ours_ms"] / encoding["plain_ms"]
    )
    text = (tmp_path / "trials_per_hour.md").read_text()
    assert "| ensemble |" in text and "| rope |" in text
