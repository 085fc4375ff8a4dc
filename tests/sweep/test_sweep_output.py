"""What a user sees of a sweep when nobody watches a terminal (issue 45): in a file or pipe, a line per trial started,
done, failed or pruned and a progress line every --progress_every seconds, written as they happen; and at any
width, on a terminal or in a file, no trial id, metric name, number or path split across lines.

Claims of docs/sweeps.md covered here:
- "`cli.py sweep ... > sweep.out`: a line per trial ... a progress line every --progress_every seconds":
  test_a_sweep_to_a_file_writes_its_trials_as_they_happen, test_plain_lines_name_every_trial_event
- "nothing wrapped or cut in a file; on a terminal, wrapped only between words":
  test_the_sweep_views_never_split_a_token
"""

import io
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from sweep_helpers import fake_sweep

from pe_sweeps.runs.console import app_console
from pe_sweeps.sweep import display as sd

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = [60, 80, 120, 200]


def test_a_sweep_to_a_file_writes_its_trials_as_they_happen(tmp_path):
    """`cli.py sweep s.yaml > sweep.out` wrote two lines until the sweep ended (the live view draws only on a
    terminal): now each trial's start and end are in the file while the sweep runs, and a progress line."""
    path = fake_sweep(tmp_path, 3)
    out = tmp_path / "sweep.out"
    env = {**os.environ, "WANDB_MODE": "disabled", "FAKE_SLEEP": "1", "FAKE_CRASH_X": "2", "COLUMNS": "60"}
    command = [sys.executable, "cli.py", "sweep", str(path), f"--out_dir={tmp_path}", "--max_retries=0",
               "--progress_every=1"]  # fmt: skip
    with open(out, "w") as stdout:
        sweep = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while "trial 0 done" not in out.read_text() and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.1)
        running = sweep.poll() is None  # trial 0 is reported while trials 1 and 2 (2 s each) have yet to run
        seen = out.read_text()
        sweep.wait(timeout=120)
    assert running and "trial 0 done" in seen, seen
    text = out.read_text()
    lines = text.splitlines()
    log = f"{tmp_path}/sweeps/f/trial-0/output.log"
    assert f"trial 0 started: x=1; log {log}" in lines, text
    assert re.search(r"^trial 0 done in \d+s: val/acc=1 \(x=1\)$", text, re.M), text
    assert re.search(r"^trial 1 failed in \d+s: exit code 1: RuntimeError: boom.* \(x=2\)$", text, re.M), text
    assert re.search(r"^trial 2 done in \d+s: val/acc=3 \(x=3\)$", text, re.M), text
    progress = [line for line in lines if re.match(r"\[\d\d:\d\d:\d\d\] f  done \d", line)]
    assert len(progress) >= 2 and all("elapsed" in line and ("ETA" in line) for line in progress), text
    assert "ETA after the first trial ends (3 to go)" in progress[0]
    # in a file nothing is wrapped at $COLUMNS: the table's rows and the commands are one line each
    assert f"dashboard: optuna-dashboard sqlite:///{tmp_path}/sweeps/f/optuna.db --host 127.0.0.1" in lines


DISTRIBUTIONS = {"model.arch.encoding": CategoricalDistribution(["rope", "relative_bias_with_a_long_name"]),
                 "model.lr": FloatDistribution(1e-4, 1e-2, log=True),
                 "seed_everything": IntDistribution(0, 9)}  # fmt: skip
PARAMS = {"model.arch.encoding": "rope", "model.lr": 0.0012345, "seed_everything": 3}
GRID = {"method": "grid", "parameters": {"seed_everything": {"values": [0, 1, 2]}}}  # three points


def add_done(study: optuna.Study, params: dict, values: list[float], seconds: int = 12) -> None:
    start = datetime.now() - timedelta(seconds=seconds)
    made = create_trial(params=params, distributions={k: DISTRIBUTIONS[k] for k in params}, values=values)
    made.datetime_start, made.datetime_complete = start, start + timedelta(seconds=seconds)
    study.add_trial(made)


def test_plain_lines_name_every_trial_event(monkeypatch):
    study = optuna.create_study(study_name="paper", direction="maximize")
    add_done(study, PARAMS, [0.5])
    for point in (1, 2):
        study.enqueue_trial({**PARAMS, "seed_everything": point})
    console = app_console(file=io.StringIO())
    progress = sd.PlainProgress(console, ["val/acc"], GRID, workers=1, every=3600)
    progress.tick(study)  # a resumed sweep: trial 0 finished before, not listed again
    first = study.ask(DISTRIBUTIONS)
    first.set_user_attr("log", "out/sweeps/paper/trial-1/output.log")
    second = study.ask(DISTRIBUTIONS)  # asked, not started (no log yet): not yet listed
    progress.tick(study)
    progress.tick(study)  # nothing changed: nothing written
    first.report(0.25, 1)
    first.report(0.125, 2)
    first.set_user_attr("reason", "pruned at validation 2")
    study.tell(first, state=TrialState.PRUNED)
    second.set_user_attr("reason", "exit code 1: RuntimeError: boom")
    study.tell(second, state=TrialState.FAIL)
    monkeypatch.setattr(progress, "every", 0)
    progress.tick(study)
    lines = console.file.getvalue().splitlines()
    assert lines[0].startswith("[") and lines[0].endswith("ETA ~0m24s"), lines  # 2 x 12 s
    assert "paper  done 1  running 0  failed 0  pruned 0  queued 2  best 0.5 (trial 0: " in lines[0]
    params = "encoding=rope, lr=0.0012345, seed_everything="
    assert lines[1] == f"trial 1 started: {params}1; log out/sweeps/paper/trial-1/output.log"
    assert lines[2] == f"trial 1 pruned in 0s: pruned at validation 2, val/acc=0.125 ({params}1)"
    assert lines[3] == f"trial 2 failed in 0s: exit code 1: RuntimeError: boom ({params}2)"
    assert lines[4].endswith("ETA ~0m00s") and len(lines) == 5, lines  # nothing left to run


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "file"])
@pytest.mark.parametrize("width", WIDTHS)
def test_the_sweep_views_never_split_a_token(width, tty, monkeypatch):
    """In a file, rich assumed 80 columns ($COLUMNS): the status line broke `(trial` / `0: ...` and wrapped the
    parameters; on a narrow terminal too, and the trial table cut numbers (`0…`). Now a file's lines are never
    wrapped, and a terminal's only between chunks (a chunk too long for a line is shortened at its start)."""
    monkeypatch.setenv("COLUMNS", str(width))
    metrics = ["val/acc", "val/acc_ood"]
    study = optuna.create_study(study_name="paper-encodings", directions=["maximize", "maximize"])
    for n in range(3):
        add_done(study, {**PARAMS, "seed_everything": n}, [0.98765, 0.123456])
    long_params = {**PARAMS, "model.arch.encoding": "relative_bias_with_a_long_name"}
    study.enqueue_trial(long_params)
    log = "out/sweeps/paper-encodings/trial-3/output.log"
    console = app_console(file=io.StringIO(), force_terminal=tty, record=True)
    assert console.is_terminal == tty and (console.width == width) == tty
    url = "sqlite:///out/sweeps/paper-encodings/optuna.db"
    with sd.LiveStatus(console, url, metrics, GRID, workers=2, every=60) as live:
        running = study.ask(DISTRIBUTIONS)
        running.set_user_attr("log", log)
        live.tick(study)
        study.tell(running, [0.5, 0.25])
        live.tick(study)
    live_text = console.export_text()  # the frames of the live region, one after the other
    console.print(sd.trial_table(study, metrics))
    table = console.export_text()
    text = live_text + table
    tokens = ["val/acc", "val/acc_ood", "0.9877", "0.1235", "0.5000", "lr=0.0012345", "relative_bias_with_a_long_name",
              "paper-encodings", f"dashboard: optuna-dashboard {url} --host 127.0.0.1"]  # fmt: skip
    if tty:  # the live status: `trial 3` and its log, shortened only when a line is too narrow for it
        tokens += ["trial 3", "starting", log if width >= len(log) + 6 else "…/trial-3/output.log"]
    else:  # a line per event, each whole
        tokens += [f"trial 3 started: encoding=relative_bias_with_a_long_name, lr=0.0012345, seed_everything=3; "
                   f"log {log}", "trial 3 done in 0s: val/acc=0.5, val/acc_ood=0.25 (encoding="]  # fmt: skip
    missing = [token for token in tokens if token not in text]
    assert not missing, text
    if tty:  # the table fits the terminal
        assert max(map(len, table.splitlines())) <= width, table


@pytest.mark.parametrize("width", [20, 60])
def test_pack_breaks_only_between_chunks(width):
    chunks = ["trial 12", "(encoding=rope,", "lr=0.001):", "step 10/20,", "ETA 0m10s", f"log {'/a' * 40}/output.log"]
    lines = sd.pack(chunks, width, "  ")
    assert all(len(line) <= width for line in lines[:-1])
    joined = " ".join(line.strip() for line in lines)
    assert joined.startswith("trial 12 (encoding=rope, lr=0.001): step 10/20, ETA 0m10s log …")
    assert lines[-1].endswith("/a/output.log") and len(lines[-1]) <= width
