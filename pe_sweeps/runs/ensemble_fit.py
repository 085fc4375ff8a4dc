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
gets its own W&B run once the ensemble has trained (`replay_to_wandb`: one W&B run at a time).

Resuming: each member's last.ckpt also holds `pe_ensemble`: its AdamW moments, the schedule, its data loader's
position (epoch and a StatefulDataLoader state), its training rows (for its W&B run) and the ensemble's members.
`fit --ckpt_path=<member>/checkpoints/last.ckpt` goes on from it as an ensemble of that one member (a sweep's
retry of one trial), and with `--run.ensemble_seeds` as the ensemble of those seeds (each from its own folder's
checkpoint; a member whose record is final is left as it is). Checkpoints are replaced whole (written beside,
then renamed), so a kill leaves the previous one. Not yet: CUDA (the CPU only), DDP, `--run.test_at_end`.
"""

import copy
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from lightning_modules.ensemble import SeedEnsemble, stack_batches
from lightning_modules.optim import check_finite
from pe_core.errors import ConfigError, DivergedError
from pe_sweeps.failpoints import failpoint
from pe_sweeps.layout import PRUNE_FILE
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
    validator: pl.Trainer | None = None  # the Trainer that validates it (and saves its checkpoint)
    stamp: "Stamp | None" = None  # what the validator adds to the checkpoint it saves next
    batches: "EpochBatches | None" = None  # its training batches, epoch after epoch
    resume: dict | None = None  # its checkpoint (`--ckpt_path`): weights and `pe_ensemble`, the training state


def member_seeds(ensemble_seeds: int | list[int], seed: int) -> list[int]:
    """The members' seeds: `seed`, `seed` + 1, ... for a count; a list as given (its first is `seed`)."""
    return list(ensemble_seeds) if isinstance(ensemble_seeds, list) else [seed + i for i in range(ensemble_seeds)]


def check_ensemble_options(ensemble_seeds: int | list[int], seed, max_steps: int | None, val_check_interval, devices,
                           accelerator, test_at_end: bool) -> None:  # fmt: skip
    """One line for the settings an ensemble cannot follow (yet), before anything is built."""
    if isinstance(ensemble_seeds, list):
        if not ensemble_seeds or len(set(ensemble_seeds)) != len(ensemble_seeds) or ensemble_seeds[0] != seed:
            raise ConfigError(f"--run.ensemble_seeds as a list needs distinct seeds, the first being --seed_everything "
                              f"({seed}); got {ensemble_seeds}")  # fmt: skip
    elif ensemble_seeds < 1:
        raise ConfigError(f"--run.ensemble_seeds must be >= 1 (1: one run) or a list of seeds, got {ensemble_seeds}")
    elif ensemble_seeds == 1:
        return
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
                 accelerator: str = "cpu", hyper_parameters: dict | None = None) -> SeedEnsemble:  # fmt: skip
    """Train `members` as one SeedEnsemble (`build(seed)`: a member's task module) for `max_steps`, validating
    each every `val_every` steps and at the end, and keep each member's record and last checkpoint (whose
    `hyper_parameters`, when given, are the CLI model's: `fit --ckpt_path` parses them as a solo run's)."""
    ensemble = SeedEnsemble(build, [m.seed for m in members])
    ensemble.hyper_parameters = hyper_parameters
    template = ensemble.template
    hp = template.hparams
    ensemble.configure_optimizer(hp.lr, hp.weight_decay, template.warmup(max_steps), hp.lr_decay, max_steps, clip)
    start = resume_step(members)
    for i, member in enumerate(members):
        member.data.setup("fit")
        member.batches = EpochBatches(member.data)
        if member.resume is not None:  # its weights, AdamW moments, schedule, data position and training rows
            saved = member.resume["pe_ensemble"]
            try:
                ensemble.load_member_training_state(i, member.resume["state_dict"], saved)
                member.batches.load_state_dict(saved["loader"])
            except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as error:
                raise ConfigError(
                    f"seed {member.seed}'s checkpoint does not fit this model and data (another "
                    f"configuration's?): {type(error).__name__}: {str(error)[:200]}"
                ) from None
            member.train_rows = [tuple(row) for row in saved["train_rows"]]
            member.writer.cut_history(start)  # validations after the checkpoint are done again
        record = member.writer.record
        record.started_at = record.first_step_at = time.time()
        record.first_step, record.max_steps, record.world_size, record.num_devices = start + 1, max_steps, 1, 1
        record.global_batch_size = getattr(member.data, "batch_size", None)
        record.matmul_precision = torch.get_float32_matmul_precision()
        member.writer.write()
    try:
        _train(ensemble, members, start, max_steps, val_every, accelerator)
    except BaseException as exception:  # every member still training ends as a solo run would (its record)
        for i, member in enumerate(members):
            if not ensemble.frozen[i]:
                record = member.writer.record
                record.status, record.error = status_of(exception), f"{type(exception).__name__}: {exception}"
                member.writer.write()
        raise
    return ensemble


def resume_step(members: list[Member]) -> int:
    """The step the members' checkpoints were saved at (0: a fresh ensemble); they must agree (one optimizer step
    count for all), else one line saying to resume them one by one."""
    steps = {m.resume["pe_ensemble"]["step"] for m in members if m.resume is not None}
    if any(m.resume is None for m in members) and steps:
        steps.add(0)
    if len(steps) > 1:
        saved = ", ".join(f"seed {m.seed}: step {m.resume['pe_ensemble']['step'] if m.resume else 0}" for m in members)
        raise ConfigError(f"the ensemble's members were saved at different steps ({saved}); resume each alone with "
                          "--ckpt_path=<its run>/checkpoints/last.ckpt")  # fmt: skip
    return steps.pop() if steps else 0


def _train(ensemble: SeedEnsemble, members: list[Member], start: int, max_steps: int, val_every: int,
           accelerator: str) -> None:  # fmt: skip
    lr = ensemble.template.hparams.lr
    ensemble.train()
    for step in range(start + 1, max_steps + 1):
        lr_now = ensemble.optimizer.param_groups[0]["lr"]  # this step's, as LogLearningRate logs it
        losses = ensemble.train_step(stack_batches([m.batches.next() for m in members]))
        for i, member in enumerate(members):
            if not ensemble.frozen[i]:
                member.writer.record.final |= {"train/loss": float(losses[i]), "train/lr": float(lr_now)}
                member.train_rows.append((step, float(losses[i]), float(lr_now)))
                if not torch.isfinite(losses[i]):
                    _diverged(ensemble, i, member, losses[i], step, lr)
        if step % val_every == 0 or step == max_steps:
            for i, member in enumerate(members):
                if not ensemble.frozen[i]:
                    _validate(ensemble, i, member, step, accelerator, members)
            failpoint("ensemble:validated")
            for i, member in enumerate(members):
                if not ensemble.frozen[i] and (member.writer.path.parent / PRUNE_FILE).exists():
                    _pruned(ensemble, i, member, step)
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

    def state_dict(self) -> dict:
        """Where it is: the epoch and the loader's position in it (a StatefulDataLoader's state)."""
        return {"epoch": self.epoch, "loader": self.loader.state_dict() if self.batches is not None else None}

    def load_state_dict(self, state: dict) -> None:
        """Go on from `state_dict()`: the next batch is the one an uninterrupted run would draw."""
        self.epoch, self.batches = state["epoch"], None
        if state["loader"] is not None:
            self._start_epoch()
            self.loader.load_state_dict(state["loader"])
            self.batches = iter(self.loader)

    def _start_epoch(self) -> None:
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)

    def next(self) -> dict:
        while True:
            if self.batches is None:
                self._start_epoch()
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


def _pruned(ensemble: SeedEnsemble, i: int, member: Member, step: int) -> None:
    """Its sweep pruned member i's trial (PRUNE_FILE in its run folder): it stops as a solo trial's child stopped by
    its sweep does (`interrupted`), the others go on."""
    ensemble.freeze(i)
    record = member.writer.record
    record.status, record.error, record.global_step = "interrupted", f"pruned by its sweep at step {step}", step
    member.writer.write()


class Stamp(Callback):
    """Adds `extra` to every checkpoint its Trainer saves (Lightning's on_save_checkpoint, after the module's
    weights and hyper-parameters are in it): a member's checkpoint is written once, with its resume state."""

    def __init__(self):
        self.extra: dict = {}

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint.update(self.extra)


def _validate(ensemble: SeedEnsemble, i: int, member: Member, step: int, accelerator: str,
              members: list[Member]) -> None:  # fmt: skip
    """Member i at `step` on its validation set: its record's history, final and best values, outcomes and
    last checkpoint (with what resuming it needs: `pe_ensemble`)."""
    module = ensemble.member(i)
    run_dir = member.writer.path.parent
    if member.validator is None:  # one per member, reused: its "GPU available" lines once, not at every validation
        member.stamp = Stamp()
        member.validator = pl.Trainer(accelerator=accelerator, devices=1, logger=False, enable_checkpointing=False,
                                      enable_progress_bar=False, enable_model_summary=False,
                                      default_root_dir=run_dir, callbacks=[member.stamp])  # fmt: skip
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
    partial = path.with_name("last.ckpt.partial")  # a kill mid-write leaves the previous checkpoint whole
    member.stamp.extra = {"pe_run_dir": str(Path(run_dir).resolve()), "global_step": step}
    if ensemble.hyper_parameters is not None:
        member.stamp.extra["hyper_parameters"] = dict(ensemble.hyper_parameters)
    member.stamp.extra["pe_ensemble"] = {
        "seed": member.seed, "step": step, **ensemble.member_training_state(i),
        "loader": member.batches.state_dict(), "train_rows": [list(row) for row in member.train_rows],
        "members": [{"seed": m.seed, "run_dir": str(m.writer.path.parent.resolve())} for m in members],
    }  # fmt: skip
    trainer.save_checkpoint(partial)
    os.replace(partial, path)
    record.checkpoints["last"] = {"path": str(path), "step": step}
    writer.write()


def check_member_checkpoint(checkpoint: dict, where: str) -> dict:
    """`checkpoint` if its `pe_ensemble` has what resuming a member reads (`_validate` writes it), else one line
    naming `where` (a crafted or foreign file never reaches the model as a traceback)."""
    saved = checkpoint.get("pe_ensemble")
    shape = {"seed": int, "step": int, "optimizer": dict, "schedule": dict, "loader": dict, "train_rows": list,
             "members": list}  # fmt: skip
    wrong = [k for k, kind in shape.items() if not isinstance(saved, dict) or not isinstance(saved.get(k), kind)]
    if not wrong and not isinstance(checkpoint.get("state_dict"), dict):
        wrong = ["state_dict"]
    if not wrong and not all(is_member(m) for m in saved["members"]):
        wrong = ["members"]
    if not wrong and not ({"epoch", "loader"} <= set(saved["loader"]) and isinstance(saved["loader"]["epoch"], int)):
        wrong = ["loader"]
    if wrong:
        raise ConfigError(f"{where} is not a seed ensemble member's checkpoint this version wrote ({wrong[0]!r} "
                          "is missing or malformed in it); resume from its own checkpoints/last.ckpt")  # fmt: skip
    return checkpoint


def is_member(entry) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("seed"), int) and isinstance(entry.get("run_dir"), str)


def resumed_members(checkpoint: dict, seeds: list[int]) -> dict[int, dict | None]:
    """For `fit --ckpt_path` of a member's checkpoint: each other member's run folder and checkpoint (read as plain
    data), None for one whose record is final (finished or diverged: nothing to resume); one line for a seed the
    checkpoint's ensemble did not have, or a member whose checkpoint is missing or unreadable."""
    from lightning_modules.checkpoint_io import read_checkpoint
    from pe_sweeps.runs.records import read_record

    saved = checkpoint["pe_ensemble"]
    if seeds[0] != saved["seed"]:
        raise ConfigError(f"--ckpt_path is seed {saved['seed']}'s checkpoint, but --seed_everything is {seeds[0]}: "
                          f"pass --seed_everything={saved['seed']}")  # fmt: skip
    known = {m["seed"]: Path(m["run_dir"]) for m in saved["members"]}
    unknown = [s for s in seeds[1:] if s not in known]
    if unknown:
        raise ConfigError(f"--run.ensemble_seeds: seed(s) {unknown} were not in the ensemble --ckpt_path was saved "
                          f"from (its seeds: {sorted(known)})")  # fmt: skip
    found: dict[int, dict | None] = {}
    for seed in seeds[1:]:
        record = read_record(known[seed] / "record.json", warn=False)
        if record is None:
            raise ConfigError(f"seed {seed}'s run {known[seed]} has no readable record.json; resume the others alone")
        if record.status in ("finished", "diverged"):
            found[seed] = None
            continue
        path = known[seed] / "checkpoints" / "last.ckpt"
        where = f"seed {seed}'s checkpoint"
        checkpoint = check_member_checkpoint(read_checkpoint(str(path), where, mmap=False), where)
        found[seed] = {"run_dir": known[seed], "checkpoint": checkpoint}
    return found


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
