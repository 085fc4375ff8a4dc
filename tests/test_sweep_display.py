"""The sweep's live view (tracking/sweep_display.py) and `fit`'s closing summary (tracking/summary.py), on
in-memory studies and hand-written records: no process, no training."""

import json

import optuna
from helpers import record as make_record
from rich.console import Console

from pe_sweeps.tracking import sweep_display as sd
from pe_sweeps.tracking.summary import print_fit_summary


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
    lines = sd.where_lines(url, tmp_path)
    assert lines == ["study database: postgresql://me:***@db/x",
                     "dashboard: optuna-dashboard postgresql://me:***@db/x --host 127.0.0.1"]  # fmt: skip
    console = Console(record=True, width=200)
    live = sd.LiveStatus(console, "sqlite:////o/sweeps/s/optuna.db")
    with live:
        live.tick(optuna.create_study(study_name="s"))
    text = console.export_text()
    assert "optuna-dashboard sqlite:////o/sweeps/s/optuna.db" in text and "study database" in text


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
