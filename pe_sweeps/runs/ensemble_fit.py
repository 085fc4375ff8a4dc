"""`fit --run.ensemble_seeds K`: K seeds of one configuration trained in one process as one seed ensemble
(lightning_modules/ensemble.py, issue 47), written as K ordinary runs.

Member i is the run `--seed_everything=s+i` (s: the command's seed; its data seed too when `data.seed` follows
the run's): its model is built after `seed_everything(s+i)` and its data module with that seed, so its weights,
batches and order are a solo run's. Each member gets its own run folder, record.json (its seed, its validation
history, final and best values, status), per-example outcomes and checkpoints/last.ckpt (its weights, for
`validate`, `probe` and `init_from`), so `compare`, `reseed` and the records see K runs. A member whose training loss
stops being finite is frozen (its updates dropped) and its record says `diverged` with the one-line reason a solo
run gives, while the others go on.

Validation runs every `--trainer.val_check_interval` steps (an integer: a fraction of an epoch or epochs are
refused), each member on its own validation set through a plain `Trainer.validate`. With W&B on, each member
gets its own W&B run once the ensemble has trained (`replay_to_wandb`: one W&B run at a time). Not yet: resuming
an ensemble from its checkpoints (they hold weights, not the optimizer), CUDA (the CPU only), DDP,
`--run.test_at_end`.
"""

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
import torch

from lightning_modules.ensemble import SeedEnsemble, stack_batches
from lightning_modules.optim import check_finite
from pe_core.errors import ConfigError, DivergedError
from pe_sweeps.runs.outcomes import write_table
from pe_sweeps.runs.record_writer import RecordWriter, status_of
from pe_sweeps.runs.wandb_setup import describe_wandb_run


@dataclass
class Member:
    """One member of an ensemble: its seed, data module and record (its run folder is the record's)."""

    seed: int
    data: pl.LightningDataModule
    writer: RecordWriter
    train_rows: list = field(default_factory=list)  # (step, loss, lr) of each step, for its W&B run
    validator: pl.Trainer | None = None  # the Trainer that validates it


def check_ensemble_options(seeds: int, max_steps: int | None, val_check_interval, devices, accelerator, ckpt_path,
                           test_at_end: bool) -> None:  # fmt: skip
    """One line for the settings an ensemble of `seeds` members cannot follow (yet), before anything is built."""
    if seeds < 1:
        raise ConfigError(f"--run.ensemble_seeds must be >= 1 (1: one run), got {seeds}")
    if seeds == 1:
        return
    if ckpt_path:
        raise ConfigError("--run.ensemble_seeds cannot resume from --ckpt_path yet; fit its seeds one by one")
    if test_at_end:
        raise ConfigError("--run.ensemble_seeds cannot --run.test_at_end yet; test each member's checkpoint")
    if not isinstance(max_steps, int) or max_steps <= 0:
        raise ConfigError("--run.ensemble_seeds needs --trainer.max_steps (a positive number of steps)")
    if not isinstance(val_check_interval, int) or isinstance(val_check_interval, bool):
        raise ConfigError(
            f"--run.ensemble_seeds needs an integer --trainer.val_check_interval (validate every N steps), got "
            f"{val_check_interval!r}"
        )
    if accelerator not in ("cpu", "auto", None) or (accelerator != "cpu" and torch.cuda.is_available()):
        raise ConfigError(
            "--run.ensemble_seeds trains on the CPU only for now (a solo CUDA run's bf16-mixed precision is not "
            "batched yet); pass --trainer.accelerator=cpu"
        )
    if devices not in ("auto", 1, "1", [0]):
        raise ConfigError(f"--run.ensemble_seeds trains in one process on one device; got --trainer.devices={devices}")


def fit_ensemble(build, members: list[Member], max_steps: int, val_every: int, clip: float | None,
                 accelerator: str = "cpu") -> SeedEnsemble:  # fmt: skip
    """Train `members` as one SeedEnsemble (`build(seed)`: a member's task module) for `max_steps`, validating
    each every `val_every` steps and at the end, and keep each member's record and last checkpoint."""
    ensemble = SeedEnsemble(build, [m.seed for m in members])
    template = ensemble.template
    hp = template.hparams
    ensemble.configure_optimizer(hp.lr, hp.weight_decay, template.warmup(max_steps), hp.lr_decay, max_steps, clip)
    for member in members:
        member.data.setup("fit")
        record = member.writer.record
        record.started_at = record.first_step_at = time.time()
        record.first_step, record.max_steps, record.world_size, record.num_devices = 1, max_steps, 1, 1
        record.global_batch_size = getattr(member.data, "batch_size", None)
        record.matmul_precision = torch.get_float32_matmul_precision()
        member.writer.write()
    try:
        _train(ensemble, members, max_steps, val_every, accelerator)
    except BaseException as exception:  # every member still training ends as a solo run would (its record)
        for i, member in enumerate(members):
            if not ensemble.frozen[i]:
                record = member.writer.record
                record.status, record.error = status_of(exception), f"{type(exception).__name__}: {exception}"
                member.writer.write()
        raise
    return ensemble


def _train(ensemble: SeedEnsemble, members: list[Member], max_steps: int, val_every: int, accelerator: str) -> None:
    lr = ensemble.template.hparams.lr
    batches = [EpochBatches(m.data) for m in members]
    ensemble.train()
    for step in range(1, max_steps + 1):
        lr_now = ensemble.optimizer.param_groups[0]["lr"]  # this step's, as LogLearningRate logs it
        losses = ensemble.train_step(stack_batches([b.next() for b in batches]))
        for i, member in enumerate(members):
            if not ensemble.frozen[i]:
                member.writer.record.final |= {"train/loss": float(losses[i]), "train/lr": float(lr_now)}
                member.train_rows.append((step, float(losses[i]), float(lr_now)))
                if not torch.isfinite(losses[i]):
                    _diverged(ensemble, i, member, losses[i], step, lr)
        if step % val_every == 0 or step == max_steps:
            for i, member in enumerate(members):
                if not ensemble.frozen[i]:
                    _validate(ensemble, i, member, step, accelerator)
        if ensemble.frozen.all():
            break
    for i, member in enumerate(members):
        record = member.writer.record
        if not ensemble.frozen[i]:
            record.status, record.global_step = "finished", max_steps
        member.writer.write()


class EpochBatches:
    """A member's training batches as a solo fit draws them: epoch after epoch, its sampler told each epoch."""

    def __init__(self, data):
        self.loader, self.epoch, self.batches = data.train_dataloader(), 0, None

    def next(self) -> dict:
        while True:
            if self.batches is None:
                sampler = getattr(self.loader, "sampler", None)
                if hasattr(sampler, "set_epoch"):
                    sampler.set_epoch(self.epoch)
                self.batches = iter(self.loader)
            try:
                return next(self.batches)
            except StopIteration:
                self.batches, self.epoch = None, self.epoch + 1


def _diverged(ensemble: SeedEnsemble, i: int, member: Member, loss, step: int, lr: float) -> None:
    ensemble.freeze(i)
    record = member.writer.record
    try:
        check_finite(loss, step, lr)
    except DivergedError as error:
        record.status, record.error, record.global_step = "diverged", f"DivergedError: {error}", step
    member.writer.write()


def _validate(ensemble: SeedEnsemble, i: int, member: Member, step: int, accelerator: str) -> None:
    """Member i at `step` on its validation set: its record's history, final and best values, outcomes and
    last checkpoint."""
    module = ensemble.member(i)
    run_dir = member.writer.path.parent
    if member.validator is None:  # one per member, reused: its "GPU available" lines once, not at every validation
        member.validator = pl.Trainer(accelerator=accelerator, devices=1, logger=False, enable_checkpointing=False,
                                      enable_progress_bar=False, enable_model_summary=False,
                                      default_root_dir=run_dir)  # fmt: skip
    trainer = member.validator
    trainer.validate(module, datamodule=member.data, verbose=False)
    module.train()
    writer, record = member.writer, member.writer.record
    writer._update(trainer)  # final and best from the validation's metrics, as a solo fit's record
    table = module.evaluation_outcomes.get("val")
    if table:
        record.outcomes["val"] = write_table(run_dir, "val", step, table)
    values = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    record.history.append({"step": step, "wandb_step": step - 1, **values})
    record.step = step
    path = Path(run_dir) / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    checkpoint["pe_run_dir"], checkpoint["global_step"] = str(Path(run_dir).resolve()), step
    torch.save(checkpoint, path)
    record.checkpoints["last"] = {"path": str(path), "step": step}
    writer.write()


def member_config(resolved: dict, seed: int, data_seed_follows: bool) -> dict:
    """Member `seed`'s resolved config: the command's, with its seed (and data seed, when it follows the run's)."""
    config = copy.deepcopy(resolved)
    config["seed_everything"] = seed
    data_args = (config.get("data") or {}).get("init_args")
    if data_seed_follows and isinstance(data_args, dict):
        data_args["seed"] = seed
    return config


def replay_to_wandb(member: Member, logger, log_every: int) -> None:
    """Member's W&B run, written once the ensemble has trained (one W&B run at a time in a process): its identity
    and config as `describe_run` gives a solo run's, `train/loss` and `train/lr` every `log_every` steps and each
    validation's values, at the steps Lightning's loggers give them (a step's values at step - 1)."""
    record = member.writer.record
    rows: dict[int, dict] = {}
    for step, loss, lr in member.train_rows:
        if (step - 1) % log_every == 0 or step == len(member.train_rows):
            rows.setdefault(step - 1, {}).update({"train/loss": loss, "train/lr": lr})
    for row in record.history:
        rows.setdefault(row["wandb_step"], {}).update({k: v for k, v in row.items() if k.startswith("val/")})
    where = describe_wandb_run(logger.experiment, record)
    for step in sorted(rows):
        logger.log_metrics(rows[step], step=step)  # WandbLogger adds trainer/global_step
    record.wandb = {**where, "dirs": [where["dir"]] if where.get("dir") else []}
    logger.finalize("success" if record.status == "finished" else "failed")
    logger.experiment.finish(exit_code=0 if record.status == "finished" else 1)
    member.writer.write()
