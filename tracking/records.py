"""Local run records: one `record.json` per run that `cli.py compare` reads (and W&B mirrors).

A record holds the resolved config, identity (task, encoding, seed, sweep), status
(running / finished / failed / diverged / interrupted), the final and best value of every metric,
and the history of validation metrics. It is rewritten atomically at every validation, so a run
killed mid-way still leaves what it had measured.
"""

import json
import os
import time
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback

from lightning_modules.errors import ConfigError, DivergedError
from lightning_modules.metrics import goal
from tracking.wandb_setup import describe_run, log_length_table

RECORD_FILE = "record.json"


def _scalars(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


class RunRecord(Callback):
    """Write and keep up to date `<run_dir>/record.json` (rank 0 only)."""

    def __init__(self, run_dir: Path, identity: dict, config: dict):
        self.path = Path(run_dir) / RECORD_FILE
        self.record = {
            **identity,
            "status": "running",
            "config": config,
            "final": {},
            "best": {},
            "history": [],
        }

    def write(self) -> None:
        self.record["updated_at"] = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record, indent=1))
        os.replace(tmp, self.path)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self.record["started_at"] = time.time()
            self.write()
            describe_run(trainer, self.record)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module, batch, batch_idx: int) -> None:
        if "first_step" not in self.record and trainer.is_global_zero:
            self.record["first_step"] = trainer.global_step + 1  # > 1 when resumed from a checkpoint
        if "startup_seconds" not in self.record and trainer.is_global_zero and "process_start" in self.record:
            self.record["startup_seconds"] = time.time() - self.record["process_start"]  # process start -> step 1

    def _update(self, trainer: pl.Trainer) -> None:
        metrics = _scalars(trainer.callback_metrics)
        self.record["final"].update(metrics)
        for key, value in metrics.items():
            best = self.record["best"].get(key)
            better = max if goal(key) == "max" else min
            self.record["best"][key] = value if best is None else better(best, value)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        self._update(trainer)
        if trainer.state.fn == "validate":  # `cli.py validate`: the run is this evaluation
            self.record["status"] = "finished"
        evals = {k: v for k, v in _scalars(trainer.callback_metrics).items() if k.startswith("val/")}
        self.record["history"].append({"step": trainer.global_step, **evals})
        self.write()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._update(trainer)
            self.record["status"] = "interrupted" if trainer.interrupted else "finished"
            self.record["global_step"] = trainer.global_step
            self.write()
            log_length_table(trainer)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._update(trainer)
            if trainer.state.fn != "fit":  # `cli.py test`: the run is this evaluation
                self.record["status"] = "finished"
            self.write()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if trainer.is_global_zero:
            self.record["status"] = status_of(exception)
            self.record["error"] = f"{type(exception).__name__}: {exception}"
            self.record["global_step"] = trainer.global_step
            self.write()


def status_of(exception: BaseException) -> str:
    """ "diverged" for a non-finite loss, "interrupted" for Ctrl-C / SIGTERM, else "failed"."""
    if isinstance(exception, DivergedError):
        return "diverged"
    if isinstance(exception, KeyboardInterrupt) or type(exception).__name__ == "SIGTERMException":
        return "interrupted"
    return "failed"


def load_records(root: Path) -> list[dict]:
    """Every record under root (recursively), each with its `run_dir`."""
    records = []
    for path in sorted(Path(root).rglob(RECORD_FILE)):
        record = json.loads(path.read_text())
        record["run_dir"] = str(path.parent)
        records.append(record)
    return records


RUN_PREFIX = "run:"


def find_checkpoint(reference: str, out_dir: str, fields: dict) -> str:
    """A checkpoint path as given, or for `run:NAME` the last.ckpt of the newest *finished* run named NAME
    anywhere under `out_dir` (plain runs and sweep trials alike). NAME may hold `{encoding}`-style fields,
    filled from `fields` (the model's arguments), so one sweep parameter points every fine-tuning trial at
    the pre-training run of its own encoding."""
    if not reference.startswith(RUN_PREFIX):
        return reference
    try:
        name = reference[len(RUN_PREFIX) :].format(**fields)
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(f"init_from {reference!r}: cannot fill {error} from the model's arguments") from None
    runs = [r for r in load_records(Path(out_dir)) if r.get("name") == name and r.get("status") == "finished"]
    checkpoints = [Path(r["run_dir"]) / "checkpoints" / "last.ckpt" for r in runs]
    checkpoints = sorted((c for c in checkpoints if c.is_file()), key=lambda c: c.stat().st_mtime)
    if not checkpoints:
        raise ConfigError(
            f"init_from {reference!r}: no finished run named {name!r} with a last.ckpt under {out_dir}; "
            "run the pre-training first (sweeps/tupe_mlm.yaml) or pass a checkpoint path"
        )
    return str(checkpoints[-1])
