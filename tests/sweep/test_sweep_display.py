"""The sweep's live view (sweep/display.py) and `fit`'s closing summary (runs/summary.py), on
in-memory studies and hand-written records: no process, no training."""

import json
import re
from pathlib import Path

import optuna
import pytest
from helpers import record as make_record
from rich.console import Console

from pe_sweeps import layout
from pe_sweeps.runs.summary import print_fit_summary
from pe_sweeps.sweep import display as sd


def test_progress_shows_step_of_max_steps_and_eta():
    record = make_record(step=60, max_steps=110, first_step=11, first_step_at=100.0)
    assert sd.progress(record, now=150.0) == "step 60/110, ETA 0m50s"  # 50 steps in 50 s, 50 to go
    assert sd.progress(None, now=0) == "starting"
    assert sd.progress(make_record(step=5, max_steps=-1, first_step=1, first_step_at=0.0), now=1.0) == "step 5"
    assert sd.duration(3725) == "1h02m"


def test_running_trials_show_progress_and_their_log(tmp_path):
    study = optuna.create_study()
    trial = study.ask()
    trial_dir = tmp_path / "trial-0"
    (trial_dir / "runs" / "r").mkdir(parents=True)
    record = {"step": 10, "max_steps": 20, "first_step": 1, "first_step_at": 0.0, "history": []}
    (trial_dir / "runs" / "r" / "record.json").write_text(json.dumps(record))
    trial.set_user_attr("trial_dir", str(trial_dir))
    trial.set_user_attr("log", str(trial_dir / "output.log"))
    (line,) = sd.running_lines(study, now=10.0)
    assert line.startswith("  trial 0 (): step 10/20, ETA 0m10s") and line.endswith(f"log {trial_dir}/output.log")


def test_live_view_names_the_database_and_the_dashboard_command(tmp_path):
    url = "postgresql://me:secret@db/x"
    lines = sd.where_lines(url)
    assert lines == ["study database: postgresql://me:***@db/x",
                     "dashboard: optuna-dashboard postgresql://me:***@db/x --host 127.0.0.1"]  # fmt: skip
    console = Console(record=True, width=200)
    live = sd.LiveStatus(console, "sqlite:////o/sweeps/s/optuna.db")
    with live:
        live.tick(optuna.create_study(study_name="s"))
    text = console.export_text()
    assert "optuna-dashboard sqlite:////o/sweeps/s/optuna.db" in text and "study database" in text


def test_the_live_views_last_line_ends_in_a_file():
    """Written to a file or pipe (a sweep's log), the final status line ran into the next print:
    '... best 7.44 (trial 1: lr=0.003)stage 1, encoding=learned: ...'."""
    import io

    console = Console(file=io.StringIO(), width=80)
    with sd.LiveStatus(console) as live:
        live.tick(optuna.create_study(study_name="s"))
    console.print("stage 1, encoding=learned")
    assert "\nstage 1, encoding=learned\n" in console.file.getvalue()


def test_fit_ends_with_final_and_best_metrics_the_record_and_the_sync_command():
    record = make_record(name="copy-rope-s0", status="finished", global_step=40,
                         final={"val/acc": 0.5, "val/acc_len_3": 1.0, "val/loss": 1.25, "train/loss": 2.0},
                         best={"val/acc": 0.75, "val/loss": 1.0},
                         wandb={"mode": "offline", "dir": "/o/runs/r/wandb/offline-run-1", "id": "x"})  # fmt: skip
    console = Console(record=True, width=120)
    print_fit_summary(record, "/o/runs/r/record.json", console)
    text = console.export_text()
    assert "copy-rope-s0: finished at step 40" in text and "record: /o/runs/r/record.json" in text
    assert "wandb sync /o/runs/r/wandb/offline-run-1" in text
    assert "val/acc " in text and "0.75" in text and "val/acc_len_3" not in text and "train/loss" not in text


# ------------------------------------------------------------------ issue 29.4: at 80 columns


def narrow_text(*renderables, lines: list[str] = ()) -> str:
    """What an 80-column terminal shows: the renderables (within 80 columns), then `lines` as the sweep prints
    commands (as long as they are: the terminal wraps them on screen only)."""
    console = Console(record=True, width=80)
    for renderable in renderables:
        console.print(renderable)
    text = console.export_text()
    assert max(map(len, text.splitlines()), default=0) <= 80
    sd.print_lines(console, list(lines))
    return text + console.export_text()


def assert_whole(text: str, numbers: list[str]) -> None:
    """Every number is on one line, with no digit of another beside it (`0.81` is not the head of `0.812`)."""
    for number in numbers:
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", text), number


@pytest.mark.parametrize("width", [80, 200])
def test_the_trial_table_never_splits_a_number_and_is_compact_when_narrow(width):
    metrics = ["val/acc", "val/acc_ood", "val/loss"]
    study = optuna.create_study(study_name="paper", directions=["maximize", "maximize", "minimize"])
    distributions = {"model.arch.encoding": optuna.distributions.CategoricalDistribution(["rope", "alibi"]),
                     "model.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
                     "seed_everything": optuna.distributions.IntDistribution(0, 9)}  # fmt: skip
    values, reason = [], "retried after the worker was lost (out of memory at step 1234)"
    for i, (encoding, lr) in enumerate([("rope", 0.0012345), ("alibi", 0.0098765)] * 3):
        values.append([0.9 - i / 97, 0.3 + i / 89, 1.2345 + i])
        study.add_trial(optuna.trial.create_trial(
            params={"model.arch.encoding": encoding, "model.lr": lr, "seed_everything": i},
            distributions=distributions, values=values[-1], user_attrs={"reason": reason} if i == 2 else {},
        ))  # fmt: skip
    console = Console(record=True, width=width)
    console.print(sd.trial_table(study, metrics))
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= width
    assert_whole(text, [f"{v:.4f}" for row in values for v in row] + ["lr=0.0012345", "lr=0.0098765"])
    assert all(f"{name} " in text for name in metrics)  # a numeric column is as wide as its name
    compact = "compact for this terminal's width: notes below the table" in text
    assert compact == (width == 80)
    assert (
        f"trial 2: {reason}" in [line.rstrip() for line in text.splitlines()]
    ) == compact  # the note, whole, in the caption when compact
    assert ("lr=0.0012345, seed_everything=0" in text) != compact  # parameters one a line when compact


def test_the_fit_summary_at_80_columns_keeps_numbers_and_commands_whole():
    final = {"val/acc": 0.98765, "val/acc_ood": 0.123456, "val/acc_ood_se": 0.0043219, "val/loss": 12.3456,
             "val/acc_depth_80": 0.5, "val/tok_acc_ood_something_long_enough_to_wrap": 0.87654}  # fmt: skip
    run = "/home/someone/experiments/positional/out/sweeps/quickstart/trial-12/runs/copy-rope-s1-20261205-101010-4242"
    record = make_record(name="copy-rope-s1", status="finished", global_step=600, final=final, best=final,
                         wandb={"mode": "offline", "dir": f"{run}/wandb/offline-run-20261205_101010-abcd1234",
                                "id": "abcd1234"})  # fmt: skip
    console = Console(record=True, width=80)
    print_fit_summary(record, f"{run}/record.json", console)
    text = console.export_text()
    assert_whole(text, [f"{v:.4g}" for v in final.values()])
    lines = text.splitlines()
    assert f"record: {run}/record.json" in lines
    assert f"W&B (offline): wandb sync {run}/wandb/offline-run-20261205_101010-abcd1234" in lines


def test_the_sweep_commands_at_80_columns_are_one_line_each(tmp_path):
    study_dir = tmp_path / "a-rather-long-output-folder-name" / "sweeps" / "quickstart"
    (study_dir / "trial-0" / "runs" / "copy-rope-s0-1" / "wandb" / "offline-run-1-abc").mkdir(parents=True)
    url = f"sqlite:///{study_dir}/optuna.db"
    lines = sd.where_lines(url, layout.offline_runs_view(study_dir))
    assert f"dashboard: optuna-dashboard {url} --host 127.0.0.1" in lines
    assert f"W&B (offline), every trial's run in the terminal: wandb leet {study_dir}/wandb" in lines
    printed = narrow_text(lines=lines).splitlines()
    assert all(line in printed for line in lines) and all(len(line) > 80 for line in lines[1:])
    console = Console(record=True, width=80)  # the live view prints them once above its region
    with sd.LiveStatus(console, url) as live:
        live.tick(optuna.create_study(study_name="quickstart"))
    assert f"dashboard: optuna-dashboard {url} --host 127.0.0.1" in console.export_text().splitlines()


def test_a_sweeps_offline_runs_are_linked_into_one_folder_wandb_leet_browses(tmp_path):
    """`wandb leet DIR` browses the runs in one folder (`wandb leet --help`: "Browse runs in a wandb directory");
    a sweep's are one folder per trial run, so `wandb leet out/sweeps/quickstart` found none (issue 29.8)."""
    assert layout.offline_runs_view(tmp_path) is None  # no offline run: no folder, no command
    assert not (tmp_path / "wandb").exists()
    runs = [tmp_path / f"trial-{i}" / "runs" / f"copy-rope-s{i}-1" / "wandb" / f"offline-run-2026_{i}-id{i}" for i in
            range(3)]  # fmt: skip
    for run in runs[:2]:
        run.mkdir(parents=True)
        (run / f"run-{run.name[-3:]}.wandb").write_text("x")
    view = layout.offline_runs_view(tmp_path)
    assert view == tmp_path / "wandb"
    assert sorted(p.resolve() for p in view.iterdir()) == [r.resolve() for r in runs[:2]]
    assert all((link / f"run-{link.name[-3:]}.wandb").is_file() for link in view.iterdir())
    runs[2].mkdir(parents=True)  # a later sweep end (a resumed sweep) adds the new run, keeps the others
    assert len(list(layout.offline_runs_view(tmp_path).iterdir())) == 3
    moved = tmp_path.parent / (tmp_path.name + "-moved")  # relative links: the study folder can move
    tmp_path.rename(moved)
    assert all(link.resolve().is_dir() for link in (moved / "wandb").iterdir())
    assert Path(moved / "wandb").is_dir()
