"""What the sweep runner puts into Optuna (sweep/study_protocol.py, trial_run.py, trial_child.py), through
Optuna's API on in-memory or temporary SQLite studies: no trial process (the end-to-end runs are in test_sweep.py)."""

import json
import types
from pathlib import Path

import optuna
import pytest

from pe_core.errors import ConfigError
from pe_sweeps.sweep import study_protocol, trial_child
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.run import SweepOptions
from pe_sweeps.sweep.trial_run import TrialRun


def options(tmp_path, **kwargs) -> SweepOptions:
    return SweepOptions(file=str(tmp_path / "file_stem.yaml"), out_dir=str(tmp_path / "out"), **kwargs)


def test_study_name_from_the_files_name_and_one_database_per_file(tmp_path):
    sweep = {"name": "lr_search"}
    opts = options(tmp_path)
    study_protocol.name_study(opts, sweep, "rope")
    assert opts.study_name == "lr_search-rope"
    assert opts.storage == f"sqlite:///{(tmp_path / 'out' / 'sweeps' / 'lr_search' / 'optuna.db').resolve()}"
    other = options(tmp_path)
    study_protocol.name_study(other, sweep, "t5_bias")
    assert other.storage == opts.storage and other.study_name == "lr_search-t5_bias"  # --set studies share it
    plain = options(tmp_path)
    study_protocol.name_study(plain, {})
    assert plain.study_name == "file_stem" and "sweeps/file_stem/optuna.db" in plain.storage
    named = options(tmp_path, study_name="mine")
    study_protocol.name_study(named, sweep, "rope")
    assert named.study_name == "mine" and "sweeps/mine/optuna.db" in named.storage
    with pytest.raises(ConfigError, match="study name"):
        study_protocol.name_study(options(tmp_path), {"name": "../up"})


def test_objectives_carry_their_metric_names(tmp_path):
    sweep = {"method": "random", "metric": {"name": "val/acc", "goal": "maximize"},
             "parameters": {"x": {"values": [1, 2]}}}  # fmt: skip
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    study = study_protocol.open_study(sweep, options(tmp_path), storage, "s", locked=True)
    assert optuna.load_study(study_name="s", storage=storage).metric_names == ["val/acc"]
    assert study.directions == [optuna.study.StudyDirection.MAXIMIZE]


def fake_trial_run(metric: str) -> TrialRun:
    run = TrialRun.__new__(TrialRun)
    run.metric = metric
    run.search = types.SimpleNamespace(multi_objective=False)
    run.runner = types.SimpleNamespace(quietly=lambda action, *args: action(*args))
    return run


def write_record(trial_dir, record: dict):
    path = trial_dir / "runs" / "r-1" / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_intermediate_values_are_reported_at_the_global_step(tmp_path):
    """At W&B's x value for the same validation (`wandb_step`, Lightning's logged step), else `step`."""
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    history = [{"step": 250, "val/acc": 0.1}, {"step": 500, "val/loss": 2.0},
               {"step": 751, "wandb_step": 750, "val/acc": 0.3}]  # fmt: skip
    write_record(tmp_path, {"history": history})
    run = fake_trial_run("val/acc")
    assert run.catch_up(trial, tmp_path, 0) == 2
    assert run.catch_up(trial, tmp_path, 0, report=True) == 2
    assert study.trials[0].intermediate_values == {250: 0.1, 750: 0.3}


def test_trial_attributes_name_its_record_and_wandb_run(tmp_path):
    study = optuna.create_study()
    trial = study.ask()
    assert trial_child.note_run(trial, tmp_path) is False  # no record yet
    where = {"id": "abc", "path": "me/pe-sweeps/abc", "mode": "offline", "dir": "/o/wandb/offline-run-x"}
    path = write_record(tmp_path, {"started_at": 1.0, "wandb": where})
    assert trial_child.note_run(trial, tmp_path) is True
    attrs = study.trials[0].user_attrs
    assert attrs["record"] == str(path) and attrs["wandb_run_id"] == "abc"
    assert attrs["wandb_run_path"] == "me/pe-sweeps/abc" and attrs["wandb_run_dir"] == "/o/wandb/offline-run-x"


def test_the_varied_parameters_reach_the_trial_as_json():
    sweep = {"parameters": {"model.arch.encoding": {"value": "rope"}, "model.lr": {"distribution": "uniform"}}}
    assert json.loads(json.dumps(sf.varied(sweep, {"model.arch.encoding": "rope", "model.lr": 0.01}))) == {
        "model.lr": 0.01
    }


SHIPPED_SWEEPS = sorted((Path(__file__).resolve().parents[2] / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED_SWEEPS, ids=lambda p: p.name)
def test_every_shipped_sweep_names_registered_encodings(path):
    study_protocol.apply_overrides(sf.load_sweep(path), [])  # raises a ConfigError for an unknown name


ENCODING_SWEEP = {
    "method": "grid", "metric": {"name": "val/acc"}, "program": "cli.py",
    "parameters": {"model.arch.encoding": {"values": ["rope", "alibi"]}, "seed_everything": {"value": 1}},
}  # fmt: skip


@pytest.mark.parametrize(
    "change, overrides, unknown",
    [
        ({}, ["model.arch.encoding=nope"], "nope"),  # --set: before, every trial failed alike (10 of them)
        ({"model.arch.encoding": {"values": ["rope", "alibbi"]}}, [], "alibbi"),
        ({"model.arch.encoding": {"value": "rope3.nnone"}}, [], "nnone"),  # a schedule label
        ({"model.arch.encoding": {"values": [["rope", "rope", "rope", "nope"]]}}, [], "nope"),  # a per-layer list
        ({"model.init_args.arch.encoding": {"value": "ropee"}}, [], "ropee"),
    ],
)
def test_an_unknown_encoding_stops_the_sweep_before_any_trial(change, overrides, unknown):
    sweep = json.loads(json.dumps(ENCODING_SWEEP))
    sweep["parameters"] |= change
    with pytest.raises(ConfigError, match=f"unknown encoding '{unknown}'.*choose one of: none, learned"):
        study_protocol.apply_overrides(sweep, overrides)
    ok = json.loads(json.dumps(ENCODING_SWEEP))
    ok["parameters"]["model.arch.encoding"] = {"values": ["rope", "rope3.none", ["rope", "none"], "tupe_a_tied"]}
    study_protocol.apply_overrides(ok, ["seed_everything=2"])


@pytest.mark.parametrize(
    "values, names",
    [(["日本", "中文"], ["s-u44da6b", "s-u7be2d2"]), (["héllo", "hello"], ["s-hello-u35b5ea", "s-hello"]),
     (["naïve café", "rope"], ["s-naive_cafe-u6ab372", "s-rope"])],
)  # fmt: skip
def test_set_values_beyond_ascii_name_distinct_readable_studies(tmp_path, values, names):
    """Every non-ASCII --set value named the study `<name>-none` (a second value then 'a different sweep file')."""
    studies = []
    for value in values:
        sweep = {"name": "s", "parameters": {"data.task": {"values": ["a", "b"]}, "x": {"values": [1, 2]}}}
        fixed, suffix = study_protocol.apply_overrides(sweep, [f"data.task={value}"])
        assert fixed["parameters"]["data.task"] == {"value": value}  # the trials get the value itself
        opts = options(tmp_path)
        study_protocol.name_study(opts, fixed, suffix)  # a valid folder name (records.check_name)
        studies.append(opts.study_name)
    assert studies == names
