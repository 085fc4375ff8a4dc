"""W&B identity, run names and what each run adds to W&B (runs/wandb_setup.py, run_naming.py,
length_tables.py, callbacks.py, console.py), on functions and a fake run: no training, no W&B process. The offline
run files of a real fit are checked in test_compare.py::test_offline_wandb_fit_logs_directions_and_length_table."""

import logging
import os
import re

import pytest
import torch
from helpers import FakeRun
from helpers import record as make_record

from pe_sweeps.runs import callbacks, console, length_tables, run_naming
from pe_sweeps.runs import wandb_setup as ws


def test_run_names_carry_the_parameters_a_sweep_varies(monkeypatch):
    """Issue 13, point 1: lr_search trials differ by name; encoding, task and seed are not repeated."""
    assert run_naming.run_name("copy", "rope", 0) == "copy-rope-s0"
    varied = {"model.lr": 0.000123456, "model.weight_decay": 0.05, "model.arch.encoding": "rope"}
    assert run_naming.run_name("copy", "rope", 1, varied) == "copy-rope-lr=0.000123-weight_decay=0.05-s1"
    other = run_naming.run_name("copy", "rope", 1, {**varied, "model.lr": 0.002})
    assert other != run_naming.run_name("copy", "rope", 1, varied)
    assert (
        run_naming.run_name("copy", "rope", 0, {"data.task_options": {"a": "b/c"}}) == "copy-rope-task_options=a_b_c-s0"
    )
    monkeypatch.setenv(run_naming.SWEEP_PARAMS_ENV, '{"model.lr": 0.001}')
    assert run_naming.sweep_params() == {"model.lr": 0.001}
    monkeypatch.setenv(run_naming.SWEEP_PARAMS_ENV, "not json")
    assert run_naming.sweep_params() == {}


def test_a_derived_name_too_long_for_a_folder_is_shortened_with_a_hash():
    """Long varied values (e.g. encoding options with a path) made a name over 255 bytes: the run folder could not
    be made. Such a name keeps its start and ends with a hash of the whole, so trials still differ."""
    from pe_sweeps.runs.records import MAX_NAME_BYTES, check_name

    assert run_naming.run_name("copy", "rope", 0, {"model.lr": 0.001}) == "copy-rope-lr=0.001-s0"  # short: as before
    names = {
        run_naming.run_name("copy", "rope", 0, {"model.arch.encoding_options": {"init_from": "x" * n}})
        for n in (300, 301)
    }
    assert len(names) == 2
    for name in names:
        check_name("--run.name", name)  # a valid folder name, at most MAX_NAME_BYTES
        assert len(name.encode()) == MAX_NAME_BYTES and name.startswith("copy-rope-encoding_options=init_from_xx")
        assert re.fullmatch(r".*x-h[0-9a-f]{10}-s0", name), name


def test_a_wandb_agents_run_is_named_by_its_sweep_parameters(tmp_path, monkeypatch):
    """A run that `wandb agent` starts reads its parameters from the file the agent writes (W&B's own writer)."""
    from wandb.sdk.lib.config_util import save_config_file_from_dict

    path = tmp_path / "wandb" / "sweep-abc" / "config-r1.yaml"
    save_config_file_from_dict(str(path), {"model.lr": {"value": 0.002}, "model.arch.encoding": {"value": "rope"}})
    monkeypatch.delenv(run_naming.SWEEP_PARAMS_ENV, raising=False)
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(path))
    assert run_naming.sweep_params() == {"model.lr": 0.002, "model.arch.encoding": "rope"}
    assert run_naming.run_name("copy", "rope", 0, run_naming.sweep_params()) == "copy-rope-lr=0.002-s0"
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(tmp_path / "missing.yaml"))
    assert run_naming.sweep_params() == {}


def test_groups_are_sweep_task_encoding():
    assert run_naming.run_group("copy", "rope", "lr_search-rope") == "lr_search-rope/copy/rope"
    assert run_naming.run_group("copy", "rope", "pe-sweeps") == "pe-sweeps/copy/rope"


def test_config_seed_is_the_training_seed_and_varied_parameters_are_top_level(monkeypatch):
    run = FakeRun()
    monkeypatch.setattr(ws, "wandb_run", lambda trainer: run)
    monkeypatch.setenv(run_naming.SWEEP_PARAMS_ENV, '{"model.lr": 0.003, "seed_everything": 2}')
    record = make_record(task="copy", encoding="rope", seed=2, sweep="s", config={"data": {"init_args": {"seed": 0}}})
    where = ws.describe_run(None, record)
    assert run.config["seed"] == 2 and run.config["data_seed"] == 0 and run.config["seed_everything"] == 2
    assert run.config["encoding"] == "rope" and run.config["task"] == "copy" and run.config["lr"] == 0.003
    assert where == {"id": "abc", "path": "pe-sweeps/abc", "mode": "offline", "dir": "/r/wandb/x"}


def test_lightning_hyperparameters_rename_the_data_seed(monkeypatch):
    """The data module's `seed` hyperparameter must not overwrite the config's training `seed`."""
    seen = {}
    monkeypatch.setattr(ws.WandbLogger, "log_hyperparams", lambda self, params: seen.update(params))
    logger = ws.DirectedWandbLogger.__new__(ws.DirectedWandbLogger)
    ws.DirectedWandbLogger.log_hyperparams(logger, {"seed": 7, "lr": 0.1})
    assert seen == {"data_seed": 7, "lr": 0.1}


def test_per_length_results_are_logged_against_length_with_an_identity_table(monkeypatch):
    import wandb

    run = FakeRun()
    monkeypatch.setattr(length_tables, "wandb_run", lambda trainer: run)
    monkeypatch.setattr(wandb, "Table", lambda columns, data: {"columns": columns, "data": data})

    class Trainer:
        callback_metrics = {"val/acc_len_2": 1.0, "val/acc_len_10": 0.5, "val/tok_acc_len_2": 1.0,
                            "val/tok_acc_len_10": 0.75, "val/acc": 1.0, "val/ppl_ctx_128_stride_64": 3.0}  # fmt: skip

    length_tables.log_by_length(Trainer(), make_record(task="copy", encoding="rope", seed=3))
    assert run.defined["val_by_length/acc"]["step_metric"] == length_tables.LENGTH
    assert run.defined["val_by_length/tok_acc"]["step_metric"] == length_tables.LENGTH
    rows = [r for r in run.logged if length_tables.LENGTH in r]
    assert rows == [{"length": 2, "val_by_length/acc": 1.0, "val_by_length/tok_acc": 1.0},
                    {"length": 10, "val_by_length/acc": 0.5, "val_by_length/tok_acc": 0.75}]  # fmt: skip
    (table,) = [r["val_by_length/table"] for r in run.logged if "val_by_length/table" in r]
    assert table["columns"] == ["task", "encoding", "seed", "length", "acc", "tok_acc"]
    assert table["data"][1] == ["copy", "rope", 3, 10, 0.5, 0.75]


def test_lm_perplexity_per_context_gets_the_length_axis_too():
    rows = length_tables.by_length_rows(
        {"val/ppl_ctx_128": 7.0, "val/ppl_ctx_256": 8.0, "val/ppl_ctx_256_stride_64": 1.0}
    )
    assert rows == {128: {"val_by_length/ppl": 7.0}, 256: {"val_by_length/ppl": 8.0}}


def test_wandb_silent_is_not_forced(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    ws.make_wandb_logger(tmp_path, "n", "g", "p", None, [])
    assert "WANDB_SILENT" not in os.environ


def test_learning_rate_is_logged_every_logged_step_only():
    """Issue 26: a float logged is copied to the device (a sync on CUDA): only on the steps Lightning logs."""
    logged = {}

    class Module:
        def log(self, name, value, **kwargs):
            logged[name] = value

    class Trainer:
        optimizers = [type("Opt", (), {"param_groups": [{"lr": 0.25}, {"lr": 0.25}]})()]
        _logger_connector = type("Connector", (), {"should_update_logs": False})()

    callbacks.LogLearningRate().on_train_batch_start(Trainer(), Module(), None, 0)
    assert logged == {}
    Trainer._logger_connector.should_update_logs = True
    callbacks.LogLearningRate().on_train_batch_start(Trainer(), Module(), None, 0)
    assert logged == {"train/lr": 0.25}


def test_lightning_tips_are_dropped(caplog):
    console.quiet_lightning_tips()
    console.quiet_lightning_tips()  # idempotent
    log = logging.getLogger("lightning_fabric.utilities.rank_zero")
    assert sum(isinstance(f, console.DropLightningTips) for f in log.filters) == 1
    with caplog.at_level(logging.INFO, logger=log.name):
        log.info("💡 Tip: For seamless cloud logging, try installing litlogger")
        log.info("GPU available: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False"]


@pytest.mark.parametrize("docs_line", ["wandb sync out/sweeps/*/trial-*/runs/*/wandb/offline-run-*"])
def test_the_docs_sync_hint_matches_where_sweep_trials_write(docs_line, tmp_path):
    """docs/training.md's glob matches the folder a sweep trial's offline run is in, as the sweep prints it."""
    from pathlib import Path

    from pe_sweeps import layout
    from pe_sweeps.sweep.display import where_lines

    training = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    assert docs_line in training
    offline = tmp_path / "out" / "sweeps" / "st" / "trial-0" / "runs" / "r-1" / "wandb" / "offline-run-1"
    offline.mkdir(parents=True)
    assert sorted((tmp_path / "out").glob(docs_line.split(" ", 2)[2][len("out/") :])) == [offline]
    sync, leet = where_lines("sqlite:///x.db", layout.offline_runs_view(tmp_path / "out" / "sweeps" / "st"))[-2:]
    assert sync.endswith("sweeps/st/trial-*/runs/*/wandb/offline-run-*") and leet.endswith("sweeps/st/wandb")
    assert "wandb leet out/sweeps/quickstart/wandb" in training  # the page names the folder leet browses


def test_progress_bar_shows_steps_not_epoch_of_minus_two():
    import types

    bar = callbacks.StepProgressBar()
    trainer = types.SimpleNamespace(loggers=[], progress_bar_metrics={"train/loss": 1.5}, max_steps=3000,
                                    global_step=120, max_epochs=-1)  # fmt: skip
    assert bar.get_metrics(trainer, None) == {"step": "120/3000", "train/loss": 1.5}
    assert bar._get_train_description(0).strip() == "Epoch 0"
    assert bar.refresh_rate == 10  # renders a second (Lightning's 100 drew a tiny model's every step)
    # train/loss (logged without prog_bar) is read from the callback metrics, while training (a device sync)
    # only every log_every_n_steps steps
    trainer.training, trainer.log_every_n_steps, trainer.progress_bar_metrics = True, 50, {}
    trainer.global_step, trainer.callback_metrics = 150, {"train/loss": torch.tensor(1.25)}
    assert bar.get_metrics(trainer, None) == {"step": "150/3000", "train/loss": 1.25}
    trainer.global_step, trainer.callback_metrics = 151, {"train/loss": torch.tensor(1.0)}
    assert bar.get_metrics(trainer, None) == {"step": "151/3000", "train/loss": 1.25}


def test_encoding_options_and_given_arch_fields_set_a_run_apart():
    """Issue 29.2: four rope set-ups run by hand were all `copy-rope-s0` in one W&B group."""
    default = {"dim": 128, "depth": 2, "num_heads": 4, "vocab_size": 64, "max_length": 256}
    arch = {**default, "dim": 64, "num_heads": 4, "vocab_size": 20}
    argv = ["--config=c.yaml", "--model.arch.dim=64", "--model.arch.num_heads", "4", "--model.arch.vocab_size=20"]
    options = {"arch.encoding_options": {"base": 500}}
    distinct = run_naming.distinguishing(options, arch, default, argv)
    # options always; a given field only when it differs from the default; linked fields never
    assert distinct == {"model.arch.encoding_options.base": 500, "model.arch.dim": 64}
    assert run_naming.run_name("copy", "rope", 0, distinct) == "copy-rope-base=500-dim=64-s0"
    assert run_naming.setup_label("rope", distinct) == "rope-base=500-dim=64"
    assert run_naming.distinguishing({"arch.encoding_options": None}, default, default, []) == {}
    names = {run_naming.run_name("copy", "rope", 0, run_naming.distinguishing({"x": {"base": b}}, {}, {}, []))
             for b in (500, 10000, 1e6)} | {run_naming.run_name("copy", "rope", 0, {})}  # fmt: skip
    assert len(names) == 4
    long = run_naming.setup_label("rope", {f"model.arch.encoding_options.k{i}": "v" * 20 for i in range(5)})
    assert long.startswith("rope-h") and len(long) < 20  # a short hash beyond 80 bytes
