"""W&B setup: offline unless a key is configured, the logger every fit gets, and what each run adds to W&B
beyond Lightning's logging (identity and resolved config, summaries with a direction). Run names are in
runs/run_naming.py, the per-length results in runs/length_tables.py."""

import netrc
import os
from pathlib import Path

from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities import rank_zero_only

from lightning_modules.metric_names import BEST, PER_LENGTH, STAGE_METRIC, goal, has_best, is_diagnostic
from pe_sweeps import internals
from pe_sweeps.runs.run_naming import in_name, short_key, sweep_params

STEP = "trainer/global_step"  # the x axis WandbLogger declares for every metric
DEFAULT_PROJECT = "pe-sweeps"  # a run's W&B project unless --run.project or WANDB_PROJECT names another
# per-length metrics (`<prefix><n>`) -> the name they take against the `length` axis: hidden from the automatic
# panels by DirectedWandbLogger, drawn against length by runs/length_tables.py
BY_LENGTH = {"val/acc_len_": "val_by_length/acc", "val/tok_acc_len_": "val_by_length/tok_acc",
             "val/ppl_ctx_": "val_by_length/ppl"}  # fmt: skip
# the record's resolved scale (runs/records.py `run_scale`), in the W&B config too
SCALE = ("world_size", "num_devices", "num_nodes", "precision", "global_batch_size")


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


def make_wandb_logger(
    run_dir: Path, name: str, group: str, project: str, entity: str | None, tags: list[str], run_id: str | None = None,
    best: dict | None = None,
):  # fmt: skip
    """A Lightning WandbLogger writing under run_dir; never needs network when offline. `run_id`: the W&B run
    a resumed fit continues (WandbLogger passes `resume="allow"` to `wandb.init`); `best`: the best values its
    earlier part reached (its record's), which `best/<metric>` continues from."""
    default_wandb_mode()
    logger = DirectedWandbLogger(
        name=name, group=group, project=project, entity=entity, save_dir=str(run_dir), tags=tags,
        job_type="train", id=run_id, best=best,
    )  # fmt: skip
    internals.drop_wandb_init_argument(logger, "anonymous")  # wandb warns about it in every run otherwise
    if os.environ.get("WANDB_SWEEP_ID"):
        agent_project(logger, project)
    return logger


def agent_project(logger, project: str) -> None:
    """Under a W&B agent (WANDB_SWEEP_ID) wandb.init ignores its `project` and `entity`, warning "Ignoring project
    ... when running a sweep", and takes the agent's WANDB_PROJECT / WANDB_ENTITY; without WANDB_PROJECT (an
    agent's environment made by hand, an offline run) it named the project after the checkout's folder. The
    arguments are left out, and the run's project is W&B's global setting when WANDB_PROJECT does not name one."""
    for argument in ("project", "entity"):
        internals.drop_wandb_init_argument(logger, argument)
    if not os.environ.get("WANDB_PROJECT"):
        import wandb

        wandb.setup(settings=wandb.Settings(project=project))


class DirectedWandbLogger(WandbLogger):
    """WandbLogger that declares every train/, val/ and test/ metric before its first value, x axis
    trainer/global_step. Its summary is W&B's default, the last value, a plain number: the runs table, parallel
    coordinates and a W&B sweep read `val/acc` as the run's final value (a `summary="max,last"` summary is a
    dict, shown as `val/acc.max` / `val/acc.last` columns and no `val/acc` number). The best value of a
    validation metric, by its direction (`metric_names.goal`), is a summary key of its own, `best/val/acc`, for
    the metrics whose best means something (`metric_names.has_best`). Hidden from the automatic panels: the
    per-length keys (`val/acc_len_<n>`, about 36 of them; `log_by_length` draws them against length) and the
    standard errors and example counts (`metric_names.is_diagnostic`); they stay in the history and summary
    for `compare --wandb`. Exact names, not globs: in wandb 0.31 a glob such as "val/acc*" races with
    WandbLogger's own "*" glob (which one applies to a metric is random), while an exact definition always wins."""

    def __init__(self, *args, best: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._declared: set[str] = set()
        self._best = {k: v for k, v in (best or {}).items() if tracks_best(k)}  # a resumed run's earlier best
        self._declared_best = False  # the earlier best goes into this part's summary with its first values

    @rank_zero_only
    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        for key in sorted(k for k in metrics if STAGE_METRIC.match(k) and k not in self._declared):
            hidden = bool(PER_LENGTH.search(key)) or is_diagnostic(key)
            self.experiment.define_metric(key, step_metric=STEP, hidden=hidden)
            self._declared.add(key)
        super().log_metrics(metrics, step)
        improved = {} if self._declared_best else {BEST + k: v for k, v in self._best.items()}
        self._declared_best = True
        for key, value in metrics.items():
            if tracks_best(key) and isinstance(value, (int, float)) and value == value:  # not NaN
                best = self._best.get(key)
                if best is None or (max if goal(key) == "max" else min)(best, value) != best:
                    self._best[key] = improved[BEST + key] = float(value)
        if improved:
            self.experiment.summary.update(improved)

    @rank_zero_only
    def log_hyperparams(self, params) -> None:
        """Lightning's hyperparameters, with the data module's `seed` renamed `data_seed`: the config key
        `seed` is the training seed (`seed_everything`, set by `describe_run`)."""
        params = dict(vars(params) if hasattr(params, "__dict__") and not isinstance(params, dict) else params)
        if "seed" in params:
            params["data_seed"] = params.pop("seed")
        super().log_hyperparams(params)


def tracks_best(key: str) -> bool:
    """Whether the run's summary keeps `best/<key>`: validation metrics whose best means something, one value
    per run (per-length values aside)."""
    return key.startswith("val/") and has_best(key) and not PER_LENGTH.search(key)


def wandb_run(trainer):
    """The W&B run of the trainer's WandbLogger on global rank 0; None without one or on other ranks."""
    loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
    return loggers[0].experiment if loggers and trainer.is_global_zero else None


def describe_run(trainer, record) -> dict:
    """At fit start: identity (task, encoding, seed = seed_everything, data_seed, sweep, the parameters the
    sweep varies as top-level keys) and the resolved config into the W&B config, so that `compare --wandb`
    sees what a local record holds. `record`: the run's RunRecord (runs/records.py, which imports this
    module). Returns where the run is ({} without W&B): id, path, offline folder."""
    run = wandb_run(trainer)
    return {} if run is None else describe_wandb_run(run, record)


def describe_wandb_run(run, record) -> dict:
    """`describe_run` of a W&B run itself (a seed ensemble's member, which has no trainer of its own)."""
    config = record.config
    data_seed = ((config.get("data") or {}).get("init_args") or {}).get("seed")
    identity = {"task": record.task, "encoding": record.encoding, "sweep": record.sweep}
    identity.update({short_key(k): v for k, v in sweep_params().items() if not in_name(k)})
    identity.update({short_key(k): v for k, v in record.distinct.items()})  # options, arch fields
    identity.update(seed=record.seed, seed_everything=record.seed, data_seed=data_seed)
    scale = {k: getattr(record, k) for k in SCALE}  # what `devices: auto` resolved to
    identity.update({k: v for k, v in scale.items() if v is not None})
    # a W&B agent locked the keys of its sweep config (seed_everything, the swept parameters): updating one, even
    # to its own value, warns "Config item ... was locked by 'sweep'" in every run
    update = {k: v for k, v in {**identity, "resolved_config": config}.items() if run.config.get(k, None) != v}
    run.config.update(update, allow_val_change=True)
    return wandb_location(run)


def wandb_location(run) -> dict:
    """Run id, `entity/project/id` path, mode and the folder `wandb sync` takes (offline runs)."""
    mode = "offline" if getattr(run, "offline", False) else str(getattr(run.settings, "mode", "online"))
    if mode == "disabled":
        return {}
    path = "/".join(str(p) for p in (run.entity, run.project, run.id) if p)
    folder = str(Path(run.dir).parent) if getattr(run, "dir", None) else None
    return {"id": run.id, "path": path, "mode": mode, "dir": folder}


def sync_command(folders: list[str], run_id: str | None = None) -> str | None:
    """The `wandb sync` command for offline run folders (None when there are none); several folders of one
    resumed run are synced into its one id, in order of start time."""
    if not folders:
        return None
    one_run = f"--id {run_id} " if run_id and len(folders) > 1 else ""
    return f"wandb sync {one_run}{' '.join(folders)}"
