"""`cli.py sweep FILE --dry-run` on this machine (issue 49, 5; pe_sweeps/sweep/plan.py): the trial count and an
estimate from one short calibration trial per task, extrapolated to the file's max_steps; no study database and
nothing left under --out_dir. A fake trial program (written here) starts in a blink and takes STEP_S a step."""

import re

import pytest
import yaml
from helpers import ROOT, cli_in_process

pytestmark = pytest.mark.slow  # starts a few fake trial processes

STEP_S = 0.01
FAKE = """
import json, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
steps = int(args["trainer.max_steps"])  # the last one given wins, as jsonargparse's
run = os.path.join(os.environ["PE_OUT_DIR"], "runs", "fake")
os.makedirs(run)
first_at = time.time()
time.sleep(steps * STEP_S)
record = {"first_step": 1, "first_step_at": first_at, "global_step": steps, "updated_at": time.time(), "args": args}
open(os.path.join(run, "record.json"), "w").write(json.dumps(record))
"""


def timed_sweep(tmp_path, tasks=("a", "b", "c"), seeds=(0, 1), max_steps=400):
    program = tmp_path / "timed_trial.py"
    program.write_text(f"STEP_S = {STEP_S}\n" + FAKE)
    sweep = {
        "name": "plan", "program": str(program), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"model.lr": {"values": [0.001, 0.002]}, "data.task": {"values": list(tasks)},
                       "seed_everything": {"values": list(seeds)}},
        "command": ["${env}", "${interpreter}", "${program}", f"--trainer.max_steps={max_steps}", "${args}"],
    }  # fmt: skip
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def test_dry_run_counts_trials_and_estimates_from_a_calibration(tmp_path, capsys, monkeypatch):
    path, out = timed_sweep(tmp_path), tmp_path / "out"
    args = ["sweep", str(path), f"--out_dir={out}", "--dry-run", "--workers", "2", "--threads_per_trial", "1"]
    code, stdout, err = cli_in_process(args, capsys, monkeypatch, ROOT)
    assert code == 0, err
    assert "12 trials" in stdout
    assert stdout.count("data.task=") == 3  # one calibration trial per task
    estimate = re.search(r"estimate: 12 trials, ([\d.]+) s a trial on average, 2 worker\(s\): ([\d.]+) min", stdout)
    assert estimate, stdout
    per_trial = float(estimate.group(1))
    assert 400 * STEP_S <= per_trial < 400 * STEP_S + 10  # 400 steps extrapolated from 20, plus start-up
    assert float(estimate.group(2)) == pytest.approx(12 * per_trial / 2 / 60, abs=0.06)
    assert not out.exists()  # no study database, no trial folder
    assert not list(tmp_path.glob("**/optuna.db"))


def test_dry_run_parts_say_how_each_part_runs(tmp_path, capsys, monkeypatch):
    path = timed_sweep(tmp_path, tasks=("a", "b", "c"), seeds=(0,), max_steps=40)
    args = ["sweep", str(path), f"--out_dir={tmp_path / 'out'}", "--dry-run", "--parts", "2"]
    code, stdout, err = cli_in_process(args, capsys, monkeypatch, ROOT)
    assert code == 0, err
    parts = [line for line in stdout.splitlines() if line.startswith("part ")]
    assert [p.split(":")[0] for p in parts] == ["part 1/2", "part 2/2"]
    assert "4 trials" in parts[0] and "2 trials" in parts[1]  # a, b | c, x 2 learning rates
    assert "for v in a b; do python cli.py sweep" in parts[0] and '--set "data.task=$v"' in parts[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "extra, message",
    [(["--parts", "2"], "--parts splits the plan of --dry-run"), (["--dry-run", "--parts", "4"], "pass fewer parts"),
     (["--dry-run", "--parts", "0"], "--parts must be an integer >= 1")],
)  # fmt: skip
def test_bad_parts_are_one_line(tmp_path, capsys, monkeypatch, extra, message):
    path = timed_sweep(tmp_path, seeds=(0,))
    code, stdout, err = cli_in_process(["sweep", str(path), *extra], capsys, monkeypatch, ROOT)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (stdout, err)


@pytest.mark.parametrize(
    "seconds, parts, expected",
    [
        ({"a": 1, "b": 1, "c": 1, "d": 1}, 2, [["a", "b"], ["c", "d"]]),
        ({"a": 9, "b": 1, "c": 1, "d": 1}, 2, [["a"], ["b", "c", "d"]]),  # by time, not by count
        ({"a": 1, "b": 1, "c": 1, "d": 9}, 3, [["a", "b"], ["c"], ["d"]]),  # never an empty part
        ({"a": 0, "b": 0, "c": 0}, 3, [["a"], ["b"], ["c"]]),
    ],
)
def test_parts_are_contiguous_and_of_about_equal_time(seconds, parts, expected):
    from pe_sweeps.sweep.plan import split_parts

    assert split_parts(list(seconds), seconds, parts) == expected
