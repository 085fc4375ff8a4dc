"""Every use of another library's private API, in one place: Optuna's, CPython's, W&B's, Lightning's, submitit's.

The sweep needs a few things their public APIs do not give: the storage and ids behind a study and a trial
(to read a trial's current state from another process, set its state, find stale heartbeats), CPython's
own exit steps (a forked warm trial exits as the interpreter would, without its module teardown), and W&B's
media staging folder (which forked trials would otherwise share). Each function below names what it
reaches into; nothing outside this module touches a private name of these libraries, so an upgrade is
checked here and in tests/app/test_internals.py, which runs each function on real objects.

Checked against: optuna 5.1 (pyproject pins optuna>=5.0,<6), wandb 0.31 (pinned >=0.31,<0.32), pytorch-lightning
2.6 (WandbLogger's init arguments), submitit 1.5 (its sbatch script),
CPython 3.10-3.13 (`threading._shutdown` and `atexit._run_exitfuncs` exist unchanged in all four).
"""

from __future__ import annotations

import argparse
import atexit
import sys
import tempfile
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not imported at run time: the warm-start server uses this module before Optuna is loaded
    import optuna
    from optuna.trial import FrozenTrial


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage a study reads and writes (its trials as they are now, not as this process cached them)."""
    return study._storage  # optuna: Study._storage


def study_id(study: optuna.Study) -> int:
    """The study's id in its storage (the key of every `BaseStorage` call about the study)."""
    return study._study_id  # optuna: Study._study_id


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The trial's id in its storage (unique across studies; `number` is per study)."""
    return trial._trial_id  # optuna: Trial._trial_id / FrozenTrial._trial_id


def stored_trial(study: optuna.Study, trial: optuna.Trial | FrozenTrial) -> FrozenTrial:
    """The trial as its storage holds it now (state, attributes, reported values), whoever wrote them."""
    return study._storage.get_trial(trial._trial_id)  # optuna: Study._storage, Trial._trial_id


def claim_waiting_trial(study: optuna.Study, trial: FrozenTrial) -> optuna.Trial | None:
    """Take this WAITING (queued) trial as `study.ask()` takes the next one: its state set to RUNNING (False when
    another process took it first), then a live Trial of it; None when it was taken or has finished. A seed
    ensemble's worker takes the other seeds of its grid point this way (sweep/ensemble_run.py)."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        if not storage_of(study).set_trial_state_values(trial._trial_id, state=TrialState.RUNNING):
            return None
    except UpdateFinishedTrialError:
        return None
    study._thread_local.cached_all_trials = None  # optuna: as Study.ask, which re-reads the trials after a pop
    return optuna.Trial(study, trial._trial_id)  # optuna: what Study.ask returns for a popped trial


def rdb_stale_trial_ids(storage: optuna.storages.RDBStorage, study_id: int) -> list[int]:
    """RUNNING trials of the study whose heartbeat is older than the storage's grace period, judged by the
    database's clock (what Optuna's `fail_stale_trials` uses, without failing them)."""
    return storage._get_stale_trial_ids(study_id)  # optuna: RDBStorage._get_stale_trial_ids


def parser_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions (options and positionals) a parser holds, to set their help texts after they were added."""
    return parser._actions  # CPython: argparse.ArgumentParser._actions


def join_non_daemon_threads() -> None:
    """Join the non-daemon threads, as `Py_Finalize` does first."""
    threading._shutdown()  # CPython: threading._shutdown


def run_atexit_handlers() -> None:
    """Run the `atexit` handlers now, as the interpreter does at exit."""
    atexit._run_exitfuncs()  # CPython: atexit._run_exitfuncs


def wandb_media_dir() -> tempfile.TemporaryDirectory | None:
    """W&B's one temporary folder for staging tables and images (made at import), None before W&B is imported."""
    private = sys.modules.get("wandb.sdk.data_types._private")  # wandb: wandb.sdk.data_types._private
    return None if private is None else private.MEDIA_TMP


def own_wandb_media_dir() -> None:
    """Give this (forked) process its own W&B media folder, removed when it exits, and leave the parent's
    folder to the parent. The object is changed in place: W&B's modules imported the object itself."""
    media = wandb_media_dir()
    if media is None:
        return
    media._finalizer.detach()  # CPython: TemporaryDirectory._finalizer (the parent's folder stays the parent's)
    fresh = tempfile.TemporaryDirectory("wandb-media")
    media.name, media.own = fresh.name, fresh


def drop_wandb_init_argument(logger, name: str) -> None:
    """Leave `name` out of what Lightning's WandbLogger passes to `wandb.init`: it always passes `anonymous`
    (None unless asked), and wandb 0.31 warns that the setting "has no effect" whenever it is given at all."""
    logger._wandb_init.pop(name, None)  # pytorch_lightning: WandbLogger._wandb_init


def subcommand_parsers(cli) -> list:
    """The fit/validate/test/predict parsers of a LightningCLI (a forked trial resets their defaults)."""
    return list(cli._subcommand_parsers.values())  # pytorch_lightning: LightningCLI._subcommand_parsers


def submitit_sbatch_script(**params) -> str | None:
    """The sbatch script submitit writes for a job array (`submitit.slurm.slurm._make_sbatch_string`), or None
    without submitit."""
    try:
        from submitit.slurm.slurm import _make_sbatch_string
    except ImportError:
        return None
    return _make_sbatch_string(**params)


def save_checkpoint_now(callback, trainer) -> None:
    """Save as a ModelCheckpoint saves at a validation, unless it would skip saving now (fast_dev_run, the sanity
    check, a step already saved): `ModelCheckpoint._should_skip_saving_checkpoint`, `_save_topk_checkpoint`,
    `_monitor_candidates`."""
    if not callback._should_skip_saving_checkpoint(trainer):  # pytorch_lightning: ModelCheckpoint's own save
        callback._save_topk_checkpoint(trainer, callback._monitor_candidates(trainer))


def format_model_summary(*args) -> str:
    """Lightning's model summary table as its ModelSummary callback prints it
    (`pytorch_lightning.utilities.model_summary.model_summary._format_summary_table`)."""
    from pytorch_lightning.utilities.model_summary.model_summary import _format_summary_table

    return _format_summary_table(*args)


def skip_no_op_metric_moves() -> None:
    """Every `self.log` call moves the logged metric's state to the value's device (`_ResultCollection.log` calls
    `_ResultMetric.to(value.device)`), which walks the metric's whole `__dict__` with `apply_to_collection`,
    deep-copying its metadata: about 0.3 ms a call on a CPU, a tenth of a tiny model's step, for a move that almost
    always finds everything where it is. Installed once (idempotent): a move to the device where every tensor of
    the metric already is returns the metric as it is; any other call is Lightning's own
    (`pytorch_lightning.trainer.connectors.logger_connector.result._ResultMetric.to`)."""
    import torch
    from pytorch_lightning.trainer.connectors.logger_connector.result import _ResultMetric

    lightning_to = _ResultMetric.to
    if getattr(lightning_to, "skips_no_op_moves", False):
        return

    def to(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], torch.device) and _all_on(self.__dict__, args[0]):
            return self
        return lightning_to(self, *args, **kwargs)

    to.skips_no_op_moves = True
    _ResultMetric.to = to


def _all_on(state: dict, device) -> bool:
    """Whether every tensor among `state`'s values (and among the values of its dicts: torchmetrics' `_defaults`)
    is on `device`, and no value could hold a tensor this look does not see (a module, a nested container)."""
    import dataclasses

    import torch

    def known(value, nested: bool) -> bool:
        if isinstance(value, torch.Tensor):
            return value.device == device
        if isinstance(value, torch.nn.Module):
            return False
        if isinstance(value, dict):
            return not nested and all(known(v, True) for v in value.values())
        if isinstance(value, (list, tuple, set)):
            return not any(isinstance(v, (torch.Tensor, torch.nn.Module, dict, list, tuple, set)) for v in value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return not any(isinstance(getattr(value, f.name), torch.Tensor) for f in dataclasses.fields(value))
        return True

    return all(known(value, False) for value in state.values())
