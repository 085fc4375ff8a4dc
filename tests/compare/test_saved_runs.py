"""`cli.py compare --save_runs FILE` / `--from FILE` (compare/saved_runs.py): the runs a comparison considered and
the sweep's spec, kept small, recompute the same output without the run folders or the sweep's manifest.

Claims of docs/compare.md covered here:
- "`--save_runs FILE` writes every run the comparison considered, the left-out ones too, ... and what it read
  of the sweep ...; `--from FILE` reads them back instead of --out_dir and the sweep, and every other option works
  as usual": test_from_the_saved_file_prints_what_the_runs_printed, test_other_options_work_on_a_saved_file
- "a run keeps its config, status and final and best summary metrics; of its history and the per-length
  families, the metrics not shown are dropped"; "with the commit and the command":
  test_the_file_is_small_and_says_where_it_came_from
- "`--value step=N` compares the validation at global step N (a learning curve's point), from a saved file too":
  test_a_learning_curve_point_is_compared_and_kept
- "A missing or malformed file is one line naming it": test_bad_files_and_options_are_one_line
"""

import io
import json
import math
import shlex
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest
from test_compare import grid, rec, write_records

from pe_core.errors import ConfigError
from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.saved_runs import git
from pe_sweeps.runs.manifest import write_manifest

SWEEP = {
    "metric": {"name": "val/loss", "goal": "minimize"},
    "parameters": {"model.arch.encoding": {"values": ["rope", "alibi", "none"]}, "model.lr": {"values": [1e-3, 1e-2]},
                   "data.task": {"values": ["copy", "reverse"]}, "seed_everything": {"values": [0, 1, 2]}},
}  # fmt: skip


def printed(args: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        compare_main(args)
    return out.getvalue()


@pytest.fixture
def study(tmp_path) -> Path:
    """A sweep's out_dir: the grid at two learning rates, a failed run, a NaN, a repeated seed and another sweep."""
    runs = grid() + [rec("rope", seed=s, acc=0.3, lr=0.01) for s in range(2)]
    runs += [rec("alibi", seed=5, status="failed"), rec("none", seed=6, acc=math.nan), rec("rope", seed=0, acc=0.1)]
    runs[-1].updated_at = 0.5  # an older repeat of seed 0: left out
    write_records(tmp_path, [replace(r, sweep="study") for r in runs] + [rec(acc=0.2, sweep="other")])
    write_manifest(tmp_path, "study", SWEEP, tmp_path / "study.yaml", "sqlite:///x.db")
    return tmp_path


def test_from_the_saved_file_prints_what_the_runs_printed(study, tmp_path):
    """The sweep's default metric (val/loss, by its goal) and rows (encoding, model.lr) come from the file, the
    exclusions are the same, in markdown and JSON alike; the run folders and manifest are not needed."""
    saved = tmp_path / "results" / "study.json"
    original = printed([f"--out_dir={study}", "--sweep=study", "--format=markdown", f"--save_runs={saved}"])
    assert "| encoding, model.lr |" in original and "val/loss" in original and "status failed" in original
    assert "repeats seed 0" in original and "val/loss is nan" in original
    for path in (study / "runs", study / "sweeps"):
        path.rename(path.with_name(path.name + "-moved"))
    assert printed(["--from", str(saved), "--format=markdown"]) == original
    assert printed([f"--from={saved}", "--sweep=study", "--format=markdown"]) == original
    data = json.loads(printed(["--from", str(saved), "--format=json"]))
    assert {e["run"] for e in data["excluded"]} == {"runs/run-15", "runs/run-16", "runs/run-17"}  # relative


def test_other_options_work_on_a_saved_file(study, tmp_path):
    saved = tmp_path / "all.json"
    printed([f"--out_dir={study}", "--format=csv", f"--save_runs={saved}"])  # every sweep's runs, val/acc
    for options in (["--metric=val/acc,val/loss", "--per_seed"], ["--rows=encoding,model.lr", "--value=best"],
                    ["--aggregate=median", "--best_over=model.lr"], ["--sweep=other"], ["--format=latex"]):  # fmt: skip
        from_runs = printed([f"--out_dir={study}", "--format=markdown", *options])
        assert printed([f"--from={saved}", "--format=markdown", *options]) == from_runs


def test_the_file_is_small_and_says_where_it_came_from(study, tmp_path):
    saved = tmp_path / "study.json"
    printed([f"--out_dir={study}", "--sweep=study", "--metric=val/loss,val/acc_len_8", f"--save_runs={saved}"])
    data = json.loads(saved.read_text())
    assert data["commit"] == git("rev-parse", "--short", "HEAD") and isinstance(data["dirty"], bool)
    assert data["spec"]["metrics"] == [SWEEP["metric"]] and data["spec"]["roles"]["model.lr"] == "setting"
    assert len(data["records"]) == 18 and {r["sweep"] for r in data["records"]} == {"study"}
    record = data["records"][0]
    assert "wandb" not in record and record["config"]["model"]["init_args"]["lr"]
    assert record["history"] == [{"step": 50, "val/loss": 2.5}, {"step": 100, "val/loss": 1.1}]  # no val/acc
    assert set(record["final"]) == {"val/acc", "val/loss", "val/acc_len_8"}  # acc_len_2, _4: not shown
    assert len(saved.read_bytes()) / len(data["records"]) < 2000
    args = shlex.split(data["command"])
    assert args[:3] == ["python", "cli.py", "compare"] and f"--save_runs={saved}" in args
    again = tmp_path / "again.json"
    printed([*args[3:-1], f"--save_runs={again}"])  # the command re-runs as written
    assert json.loads(again.read_text())["records"] == data["records"]


def test_a_learning_curve_point_is_compared_and_kept(study, tmp_path):
    """At step 50 every run's val/loss is 2.5 (rec's history): one tie per column, unlike the final values;
    the saved file recomputes it; a step no run validated at is one line."""
    saved = tmp_path / "curve.json"
    at_50 = printed([f"--out_dir={study}", "--sweep=study", "--value=step=50", "--format=json", f"--save_runs={saved}"])
    assert {c["mean"] for c in json.loads(at_50)["cells"]} == {2.5} and json.loads(at_50)["value"] == "step=50"
    final = json.loads(printed([f"--out_dir={study}", "--sweep=study", "--format=json"]))["cells"]
    assert len({c["mean"] for c in final}) > 1
    markdown = ["--sweep=study", "--value=step=50", "--format=markdown"]
    assert printed([f"--from={saved}", *markdown]) == printed([f"--out_dir={study}", *markdown])
    with pytest.raises(ConfigError, match="^metric 'val/loss' was not logged at step 60 by any selected run"):
        compare_main([f"--from={saved}", "--value=step=60"])
    with pytest.raises(ConfigError, match="^--value 'step=x'; choose one of: final, best, step=N$"):
        compare_main([f"--from={saved}", "--value=step=x"])


def test_bad_files_and_options_are_one_line(study, tmp_path):
    saved = tmp_path / "ok.json"
    printed([f"--out_dir={study}", f"--save_runs={saved}"])
    cases = {
        "missing.json": (None, "no such file"),
        "text.json": ("not json", "not JSON \\(Expecting value: line 1 column 1"),
        "list.json": ("[]", "not a file of `compare --save_runs` \\(no 'records' list\\)"),
        "future.json": ('{"schema_version": 9, "records": []}', "schema_version 9; this version reads 1 to 1"),
        "empty.json": ('{"schema_version": 1, "records": []}', "no runs in it"),
        "bad_record.json": ('{"schema_version": 1, "records": [{"final": []}]}', "records\\[0\\] is not a run record"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(ConfigError, match=f"^--from {path}: {message}") as error:
            compare_main([f"--from={path}"])
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="^--from reads runs from a file and --wandb from W&B: pass one of them$"):
        compare_main([f"--from={saved}", "--wandb=a/b"])
    with pytest.raises(ConfigError, match="would overwrite the --from file"):
        compare_main([f"--from={saved}", f"--save_runs={tmp_path}/../{tmp_path.name}/ok.json"])
    with pytest.raises(ConfigError, match=f"^--save_runs {tmp_path}: cannot write it"):
        compare_main([f"--from={saved}", f"--save_runs={tmp_path}"])  # a folder
