"""W&B defaults: offline unless a key is configured, one naming scheme for every run, and what each
run adds to W&B beyond Lightning's logging (identity and resolved config, summaries with a direction,
per-length results against a `length` axis and as a table, the learning rate)."""

import hashlib
import json
import logging
import netrc
import os
import re
from pathlib import Path

from pytorch_lightning.callbacks import Callback, RichProgressBar
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities import rank_zero_only

from lightning_modules.metrics import TRAIN_LOSS, goal

STEP = "trainer/global_step"  # the x axis WandbLogger declares for every metric
LENGTH = "length"  # the x axis of the per-length results (`log_by_length`)
STAGE_METRIC = re.compile(r"^(train|val|test)/")
# `cli.py sweep` hands each trial the parameters its sweep varies, {key: value} as JSON, for names and config
SWEEP_PARAMS_ENV = "PE_SWEEP_PARAMS"
# per-length metrics (`<prefix><n>`) -> the name they take against the `length` axis
BY_LENGTH = {"val/acc_len_": "val_by_length/acc", "val/tok_acc_len_": "val_by_length/tok_acc",
             "val/ppl_ctx_": "val_by_length/ppl"}  # fmt: skip
# the record's resolved scale (tracking/records.py `run_scale`), in the W&B config too
SCALE = ("world_size", "num_devices", "num_nodes", "precision", "global_batch_size")
IN_NAME = ("task", "seed_everything")  # already in every run name, with the encoding parameters (`in_name`)


def has_api_key() -> bool:
    """True when W&B could log online: WANDB_API_KEY set or an api.wandb.ai entry in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def default_wandb_mode() -> str:
    """Respect WANDB_MODE; otherwise "online" with a key and "offline" without (set for children too)."""
    if not os.environ.get("WANDB_MODE"):
        os.environ["WANDB_MODE"] = "online" if has_api_key() else "offline"
    return os.environ["WANDB_MODE"]


def sweep_params() -> dict:
    """The parameters this run's sweep varies and their values here ({} outside a sweep): from `cli.py sweep`
    (PE_SWEEP_PARAMS), else from a `wandb agent`'s parameter file (WANDB_SWEEP_PARAM_PATH, `{key: {value: v}}`;
    the agent writes every parameter of the sweep there, fixed `value:` ones too, so those are named as well)."""
    if SWEEP_PARAMS_ENV not in os.environ and os.environ.get("WANDB_SWEEP_PARAM_PATH"):
        return agent_params(Path(os.environ["WANDB_SWEEP_PARAM_PATH"]))
    try:
        params = json.loads(os.environ.get(SWEEP_PARAMS_ENV) or "{}")
    except ValueError:
        return {}
    return params if isinstance(params, dict) else {}


def agent_params(path: Path) -> dict:
    """The parameters in a W&B agent's per-run file ({} if it cannot be read: the name then lacks them)."""
    import yaml

    try:
        params = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(params, dict):
        return {}
    return {k: v["value"] for k, v in params.items() if isinstance(v, dict) and "value" in v}


def short_key(key: str) -> str:
    """`model.init_args.lr` -> `lr`: the last part of a CLI key."""
    return key.rsplit(".", 1)[-1]


def in_name(key: str) -> bool:
    """True for a sweep key every run name and group already shows: the task, the seed, and any parameter
    a task module declares as an encoding (`model.arch.encoding`, `model.decoder_encoding`: the run's
    encoding, e.g. `learned+rope`)."""
    from lightning_modules.task_modules import encoding_parameters

    return short_key(key) in IN_NAME or key in encoding_parameters()


def short_value(value) -> str:
    """A parameter value as it appears in a run name: floats to 3 significant digits, no folder separators."""
    text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9_.+@-]+", "_", text).strip("_") or "none"  # "none" for {} or ""


def run_name(task: str, encoding: str, seed: int, varied: dict | None = None) -> str:
    """`<task>-<encoding>[-<key>=<value>...]-s<seed>`, with every parameter a sweep varies (short form) so
    that two trials of one sweep never share a name. A name longer than a folder name may be (long varied
    values, e.g. encoding options) keeps its start and ends with a hash of the whole: `...-h<hash>-s<seed>`."""
    from pe_sweeps.layout import MAX_NAME_BYTES

    extra = [f"{short_key(k)}={short_value(v)}" for k, v in (varied or {}).items() if not in_name(k)]
    name = "-".join([task, encoding, *extra, f"s{seed}"])
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    tail = f"-h{hashlib.sha1(name.encode()).hexdigest()[:10]}-s{seed}"
    return name.encode()[: MAX_NAME_BYTES - len(tail)].decode(errors="ignore").rstrip("-_.") + tail


def run_group(task: str, encoding: str, prefix: str | None = None) -> str:
    """`<sweep or project>/<task>/<encoding>`: W&B's group-by then never mixes sweeps or configurations
    (the varied parameters are top-level config keys, for a finer group-by)."""
    return "/".join(filter(None, [prefix, task, encoding]))


def make_wandb_logger(
    run_dir: Path, name: str, group: str, project: str, entity: str | None, tags: list[str], run_id: str | None = None
):
    """A Lightning WandbLogger writing under run_dir; never needs network when offline. `run_id`: the W&B run
    a resumed fit continues (WandbLogger passes `resume="allow"` to `wandb.init`)."""
    default_wandb_mode()
    return DirectedWandbLogger(
        name=name, group=group, project=project, entity=entity, save_dir=str(run_dir), tags=tags,
        job_type="train", id=run_id,
    )  # fmt: skip


class DirectedWandbLogger(WandbLogger):
    """WandbLogger that declares every train/, val/ and test/ metric before its first value: summary =
    best by the metric's direction (`lightning_modules.metrics.goal`) and last, x axis trainer/global_step;
    the per-length keys (`val/acc_len_<n>`, about 36 of them) hidden from the automatic panels, since
    `log_by_length` draws them against length (they stay in the history and summary for `compare --wandb`).
    Exact names, not globs: in wandb 0.31 a glob such as "val/acc*" races with WandbLogger's own "*" glob
    (which one applies to a metric is random), while an exact definition always wins."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._declared: set[str] = set()

    @rank_zero_only
    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        for key in sorted(k for k in metrics if STAGE_METRIC.match(k) and k not in self._declared):
            per_length = key.startswith(tuple(BY_LENGTH))  # one panel per length: hidden, drawn vs `length`
            self.experiment.define_metric(key, step_metric=STEP, summary=f"{goal(key)},last", hidden=per_length)
            self._declared.add(key)
        super().log_metrics(metrics, step)

    @rank_zero_only
    def log_hyperparams(self, params) -> None:
        """Lightning's hyperparameters, with the data module's `seed` renamed `data_seed`: the config key
        `seed` is the training seed (`seed_everything`, set by `describe_run`)."""
        params = dict(vars(params) if hasattr(params, "__dict__") and not isinstance(params, dict) else params)
        if "seed" in params:
            params["data_seed"] = params.pop("seed")
        super().log_hyperparams(params)


def wandb_run(trainer):
    """The W&B run of the trainer's WandbLogger on global rank 0; None without one or on other ranks."""
    loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
    return loggers[0].experiment if loggers and trainer.is_global_zero else None


def describe_run(trainer, record: dict) -> dict:
    """At fit start: identity (task, encoding, seed = seed_everything, data_seed, sweep, the parameters the
    sweep varies as top-level keys) and the resolved config into the W&B config, so that `compare --wandb`
    sees what a local record holds. Returns where the run is ({} without W&B): id, path, offline folder."""
    run = wandb_run(trainer)
    if run is None:
        return {}
    config = record.get("config") or {}
    data_seed = ((config.get("data") or {}).get("init_args") or {}).get("seed")
    identity = {k: record.get(k) for k in ("task", "encoding", "sweep")}
    identity.update({short_key(k): v for k, v in sweep_params().items() if not in_name(k)})
    identity.update(seed=record.get("seed"), seed_everything=record.get("seed"), data_seed=data_seed)
    identity.update({k: record[k] for k in SCALE if k in record})  # what `devices: auto` resolved to
    run.config.update({**identity, "resolved_config": config}, allow_val_change=True)
    return wandb_location(run)


def wandb_location(run) -> dict:
    """Run id, `entity/project/id` path, mode and the folder `wandb sync` takes (offline runs)."""
    mode = "offline" if getattr(run, "offline", False) else str(getattr(run.settings, "mode", "online"))
    if mode == "disabled":
        return {}
    path = "/".join(str(p) for p in (run.entity, run.project, run.id) if p)
    folder = str(Path(run.dir).parent) if getattr(run, "dir", None) else None
    return {"id": run.id, "path": path, "mode": mode, "dir": folder}


def per_length(metrics: dict, prefix: str) -> dict[int, float]:
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    return {int(m[1]): float(v) for k, v in metrics.items() if (m := pattern.match(k))}


def by_length_rows(metrics: dict) -> dict[int, dict[str, float]]:
    """{length: {"val_by_length/acc": ..., ...}} from the per-length metrics (`BY_LENGTH`)."""
    rows: dict[int, dict[str, float]] = {}
    for prefix, name in BY_LENGTH.items():
        for n, value in per_length(metrics, prefix).items():
            rows.setdefault(n, {})[name] = value
    return dict(sorted(rows.items()))


def log_by_length(trainer, record: dict) -> None:
    """At fit end: the final per-length results against a `length` axis (`define_metric`, so W&B plots
    accuracy, token accuracy or perplexity against length, runs grouped by encoding), and one table with
    task, encoding, seed, length and the metrics."""
    run = wandb_run(trainer)
    rows = by_length_rows(trainer.callback_metrics)
    if run is None or not rows:
        return
    import wandb

    names = sorted({name for row in rows.values() for name in row})
    run.define_metric(LENGTH, hidden=True)
    for name in names:  # exact names: a glob would race with WandbLogger's "*" (see DirectedWandbLogger)
        run.define_metric(name, step_metric=LENGTH, summary="none")  # a best over lengths means nothing
    columns = ["task", "encoding", "seed", LENGTH, *(n.rsplit("/", 1)[-1] for n in names)]
    identity = [record.get("task"), record.get("encoding"), record.get("seed")]
    data = [[*identity, n, *(row.get(name) for name in names)] for n, row in rows.items()]
    for n, row in rows.items():
        run.log({LENGTH: n, **row})
    run.log({"val_by_length/table": wandb.Table(columns=columns, data=data)})


class LogLearningRate(Callback):
    """`train/lr`: the first parameter group's learning rate at every logged step (the schedule is ours)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        # only on the steps Lightning writes to its loggers: a float logged is copied to the device, a sync on CUDA
        if trainer.optimizers and logs_this_step(trainer):
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            pl_module.log("train/lr", float(lr), on_step=True, on_epoch=False, batch_size=1)


def logs_this_step(trainer) -> bool:
    """Whether Lightning writes this training step's logged values to its loggers (`log_every_n_steps`)."""
    connector = getattr(trainer, "_logger_connector", None)  # as Lightning's LearningRateMonitor reads it
    return connector is None or connector.should_update_logs


class StepProgressBar(RichProgressBar):
    """Lightning's rich progress bar with the global step out of max_steps ("step 120/3000") instead of
    "Epoch 0/-2" (our runs are bounded by steps; max_epochs is -1)."""

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{f'Epoch {current_epoch}':{len(self.validation_description)}}"

    shown: dict | None = None  # the metrics last read

    def get_metrics(self, trainer, pl_module) -> dict:
        """Also train/loss, which the task modules log without `prog_bar` (Lightning converts those to numbers,
        a device sync, every step): while training it is read here every `log_every_n_steps` steps only."""
        every = getattr(trainer, "log_every_n_steps", 1) or 50
        if self.shown is None or not getattr(trainer, "training", False) or trainer.global_step % every == 0:
            self.shown = super().get_metrics(trainer, pl_module)
            loss = getattr(trainer, "callback_metrics", {}).get(TRAIN_LOSS)
            if loss is not None:
                self.shown[TRAIN_LOSS] = float(loss)
        metrics, total = self.shown, trainer.max_steps
        return {"step": f"{trainer.global_step}/{total}" if total and total > 0 else trainer.global_step, **metrics}


class DropLightningTips(logging.Filter):
    """Lightning's "Tip: try installing litlogger / litmodels" advertisements, kept out of run logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip: " not in str(record.msg)


def quiet_lightning_tips() -> None:
    for name in ("lightning_fabric.utilities.rank_zero", "pytorch_lightning.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropLightningTips) for f in logger.filters):
            logger.addFilter(DropLightningTips())


def sync_command(folders: list[str], run_id: str | None = None) -> str | None:
    """The `wandb sync` command for offline run folders (None when there are none); several folders of one
    resumed run are synced into its one id, in order of start time."""
    if not folders:
        return None
    one_run = f"--id {run_id} " if run_id and len(folders) > 1 else ""
    return f"wandb sync {one_run}{' '.join(folders)}"
