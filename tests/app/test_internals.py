"""Every function of pe_sweeps/internals.py (the project's only uses of Optuna's, CPython's and W&B's private
APIs) still reaches what it names on the installed versions: real objects, no mocks."""

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from pe_sweeps import internals

ROOT = Path(__file__).resolve().parents[2]


def in_memory_study() -> tuple[optuna.Study, optuna.storages.InMemoryStorage]:
    storage = optuna.storages.InMemoryStorage()
    return optuna.create_study(storage=storage, study_name="s"), storage


def test_storage_and_ids_of_a_study_and_its_trials():
    study, storage = in_memory_study()
    optuna.create_study(storage=storage, study_name="other").ask()  # ids differ from numbers across studies
    trial = study.ask()
    assert internals.storage_of(study) is storage
    assert internals.study_id(study) == storage.get_study_id_from_name("s")
    expected = storage.get_trial_id_from_study_id_trial_number(internals.study_id(study), trial.number)
    (frozen,) = study.get_trials()
    assert internals.trial_id(trial) == internals.trial_id(frozen) == expected != trial.number


def test_stored_trial_is_what_the_storage_holds_now():
    study, storage = in_memory_study()
    trial = study.ask()
    storage.set_trial_user_attr(internals.trial_id(trial), "reason", "written by another process")
    assert internals.stored_trial(study, trial).user_attrs == {"reason": "written by another process"}
    trial.report(0.5, step=3)
    assert internals.stored_trial(study, trial).intermediate_values == {3: 0.5}
    study.tell(trial, 1.0)
    assert internals.stored_trial(study, trial).state == TrialState.COMPLETE


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_rdb_stale_trial_ids_finds_an_old_heartbeat_only(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    storage = optuna.storages.RDBStorage(url, heartbeat_interval=10, grace_period=60)
    study = optuna.create_study(storage=storage, study_name="s")
    old, fresh = study.ask(), study.ask()
    for trial in (old, fresh):
        storage.record_heartbeat(internals.trial_id(trial))
    assert internals.rdb_stale_trial_ids(storage, internals.study_id(study)) == []
    with sqlalchemy.create_engine(url).begin() as connection:  # a beat from long ago, as from a dead process
        connection.execute(
            sqlalchemy.text("UPDATE trial_heartbeats SET heartbeat = '2000-01-01 00:00:00' WHERE trial_id = :id"),
            {"id": internals.trial_id(old)},
        )
    assert internals.rdb_stale_trial_ids(storage, internals.study_id(study)) == [internals.trial_id(old)]


def test_parser_actions_are_the_added_arguments():
    parser = argparse.ArgumentParser()
    added = parser.add_argument("--lr", help="old")
    assert added in internals.parser_actions(parser)
    assert [action.dest for action in internals.parser_actions(parser)] == ["help", "lr"]


def run_python(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_process_can_join_its_threads_and_run_its_exit_handlers_then_skip_teardown():
    """As a warm trial exits (warm_start.run_program): threads joined, atexit handlers run once, os._exit."""
    out = run_python("""
        import atexit, os, threading, time
        from pe_sweeps import internals

        done = []
        threading.Thread(target=lambda: (time.sleep(0.2), done.append(1))).start()
        atexit.register(print, "handler")
        internals.join_non_daemon_threads()
        print("joined", len(done))
        internals.run_atexit_handlers()
        os._exit(0)  # no interpreter exit: the handler must not run a second time
    """)
    assert out == ["joined", "1", "handler"]


def test_a_process_gets_its_own_wandb_media_folder_and_leaves_the_parents():
    out = run_python("""
        from pe_sweeps import internals
        assert internals.wandb_media_dir() is None  # before W&B is imported
        import wandb
        parent = internals.wandb_media_dir().name
        internals.own_wandb_media_dir()
        print(parent, internals.wandb_media_dir().name)
    """)
    parent, own = out
    try:
        assert own != parent and "wandb-media" in own
        assert os.path.isdir(parent) and not os.path.exists(own)  # the parent's kept, its own removed at exit
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_a_model_reaches_its_datamodule_and_records_arch_through_public_lightning_only():
    """Model code uses no private Lightning state: the attached datamodule through the public `trainer`, `arch`
    in `hparams_initial` (what checkpoints and loggers record) through `save_hyperparameters`."""
    import pytorch_lightning as pl

    from lightning_modules.arch import ArchConfig
    from lightning_modules.synthetic_model import SyntheticTaskModel

    model = SyntheticTaskModel(ArchConfig(dim=16, depth=1, num_heads=2))
    assert model.attached_datamodule is None
    assert model.hparams_initial["arch"]["dim"] == 16 and model.hparams["arch"] == model.hparams_initial["arch"]
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.strategy.connect(model)
    model.trainer = trainer
    datamodule = pl.LightningDataModule()
    trainer.datamodule = datamodule
    assert model.attached_datamodule is datamodule


def test_lightning_cli_parsers_are_reached():
    cli = type("Probe", (), {"_subcommand_parsers": {"fit": argparse.ArgumentParser()}})()
    assert len(internals.subcommand_parsers(cli)) == 1
    from pytorch_lightning.cli import LightningCLI

    assert "_subcommand_parsers" in LightningCLI._add_subcommands.__code__.co_names  # still where Lightning keeps them


def test_wandb_init_arguments_of_lightning_s_logger_can_be_dropped(tmp_path):
    from pytorch_lightning.loggers import WandbLogger

    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert "anonymous" in logger._wandb_init  # Lightning passes it (None) on every run: W&B then warns
    internals.drop_wandb_init_argument(logger, "anonymous")
    assert "anonymous" not in logger._wandb_init


def test_submitit_writes_the_sbatch_script_of_a_job_array(tmp_path):
    pytest.importorskip("submitit")
    script = internals.submitit_sbatch_script(
        command="python cli.py sweep x.yaml", folder=tmp_path, map_count=3, array_parallelism=2,
        additional_parameters={}, setup=["export A=1"],
    )  # fmt: skip
    assert script.startswith("#!/bin/bash\n") and "#SBATCH --array=0-2%2" in script
    assert "export A=1" in script and "python cli.py sweep x.yaml" in script


def test_lightning_checkpoints_through_the_hooks_last_checkpoint_uses(tmp_path):
    """`save_checkpoint_now` writes ModelCheckpoint's file at the step it is called, and Lightning calls the
    `_save_checkpoint` hook that runs/checkpointing.py's LastCheckpoint overrides, with the file written."""
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import ModelCheckpoint

    saved = []

    class Spy(ModelCheckpoint):
        def _save_checkpoint(self, trainer, filepath):
            super()._save_checkpoint(trainer, filepath)
            saved.append((trainer.global_step, Path(filepath).is_file()))

        def on_train_batch_end(self, trainer, *args):
            internals.save_checkpoint_now(self, trainer)

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
    spy = Spy(dirpath=tmp_path, filename="last", enable_version_counter=False)
    trainer = pl.Trainer(logger=False, callbacks=[spy], enable_progress_bar=False, enable_model_summary=False,
                         max_steps=2, limit_val_batches=0)  # fmt: skip
    trainer.fit(Tiny(), data)
    assert saved[:2] == [(1, True), (2, True)] and (tmp_path / "last.ckpt").is_file()


def test_a_logged_metric_already_on_its_device_is_not_walked_again(monkeypatch):
    """`skip_no_op_metric_moves`: self.log's `_ResultMetric.to(value.device)` returns at once when every tensor of
    the metric is there (no `apply_to_collection` walk), while a move elsewhere is still Lightning's own."""
    import torch
    from pytorch_lightning.trainer.connectors.logger_connector import result

    internals.skip_no_op_metric_moves()
    internals.skip_no_op_metric_moves()  # idempotent: one wrapper, not two
    walks = []
    walk = result.apply_to_collection
    monkeypatch.setattr(result, "apply_to_collection", lambda *a, **k: walks.append(1) or walk(*a, **k))
    collection = result._ResultCollection(training=True)
    for loss in (1.5, 0.5):
        collection.log("training_step", "train/loss", torch.tensor(loss), on_step=True, on_epoch=False, batch_size=8)
    metric = collection["training_step.train/loss"]
    assert walks == [] and float(metric.value) == 0.5 and float(metric._forward_cache) == 0.5
    metric.to(torch.device("meta"))
    assert walks and metric.value.device.type == "meta"
