"""The study side of a sweep file, as the runner (sweep/run.py) uses it: directions, sampler, pruner,
how a trial's parameters are drawn and when the search stops.

Without a `scheduler:` block, or with `scheduler: {engine: wandb}`, it is our translation of W&B's search
(sweep/sweep_file.py). With `scheduler: {engine: optuna, optimizer, search_space, source}` it is what
W&B's own client-side scheduler (`wandb sweep-scheduler`, wandb.sdk.sweeps.scheduler.optuna) builds from
the same file, loaded by W&B's own functions:
- `optimizer`: a function in `source` taking W&B's `SweepInfo` and returning an `optuna.Study` or a
  `(Study, terminator)` pair (`load_optimizer_config`); without it, W&B's `create_study_from_sweep_config`.
- `search_space`: a define-by-run function in `source` taking a trial and returning the parameters
  (`load_trial_constructor`); without it, W&B's `search_space_from_sweep_config` of `parameters`.
- the study's directions are checked against `metric` / `metrics` by W&B's `validate_sweep_objective`.
W&B's scheduler keeps the study in memory; here only its sampler, pruner and directions are taken, and
the study itself lives in the runner's storage (SQLite or PostgreSQL), so it resumes and is shared by
workers and hosts. Multi-objective studies (`metrics`) cannot be pruned: Optuna's pruners rank one value.
"""

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
import wandb
from wandb.sdk.sweeps.scheduler import client as wandb_client
from wandb.sdk.sweeps.scheduler import optuna as wandb_optuna
from wandb.sdk.sweeps.sweep_info import SweepInfo

from pe_core.errors import ConfigError
from pe_sweeps.sweep import sweep_file as sf

SAMPLER_ATTR = "sampler"  # study user attribute: the pinned sampler's settings (`tpe_record`)


@dataclass
class Search:
    """What the runner asks, tells and stops with; one per sweep process, shared by its workers."""

    directions: list[str]
    metrics: list[str]
    pruner: optuna.pruners.BasePruner
    make_sampler: Callable[[int], optuna.samplers.BaseSampler]  # seed -> the sampler of one worker
    draw: Callable[[optuna.Trial], dict]  # trial -> the parameters passed to the trial's command
    terminator: Callable[[optuna.Study], bool] | None = None  # True: start no more trials
    sampler_settings: dict | None = None  # a pinned sampler's settings, recorded in the study (None: not ours)

    @property
    def multi_objective(self) -> bool:
        return len(self.directions) > 1


def build_search(sweep: dict, study_name: str = "sweep") -> Search:
    """The Search a (loaded) sweep file asks for; a bad `scheduler:` block is a one-line ConfigError."""
    if sf.engine(sweep) == "optuna":
        return optuna_search(sweep, study_name)
    method = sweep["method"]
    directions = sf.directions(sweep)
    return Search(
        directions=directions,
        metrics=sf.metric_names(sweep),
        pruner=sf.pruner(sweep),
        make_sampler=lambda seed: sf.sampler(sweep, seed),
        draw=lambda trial: {n: sf.suggest(trial, n, s, method) for n, s in sweep["parameters"].items()},
        sampler_settings=tpe_record(len(directions) > 1) if method == "bayes" else None,
    )


def tpe_record(multi_objective: bool) -> dict:
    """What a study sampled by our pinned TPE records (user attribute `sampler`); `optuna` is for the reader."""
    return {"name": "TPESampler", **sf.tpe_settings(multi_objective), "optuna": optuna.__version__}


def check_sampler(study: optuna.Study, attrs: dict, search: Search, locked: bool) -> None:
    """A resumed study must have been sampled with the settings this version pins: other TPE settings would
    draw its later trials from another distribution, so neither the file and --seed nor its recorded
    settings would reproduce it (refused, as a study of another sweep file is). A study that predates the
    pinning gets one warning line and the record."""
    if search.sampler_settings is None:
        return
    recorded = attrs.get(SAMPLER_ATTR)
    if recorded is None:
        print(f"warning: study {study.study_name!r} has no recorded sampler settings (made before they were "
              "pinned): its earlier trials may come from Optuna's defaults of the time", file=sys.stderr)  # fmt: skip
        if locked:
            study.set_user_attr(SAMPLER_ATTR, search.sampler_settings)
        return
    differ = sorted(k for k in {**recorded, **search.sampler_settings} if k != "optuna"
                    and recorded.get(k) != search.sampler_settings.get(k))  # fmt: skip
    if differ:
        was = ", ".join(f"{k}={recorded.get(k)}" for k in differ)
        now = ", ".join(f"{k}={search.sampler_settings.get(k)}" for k in differ)
        raise ConfigError(
            f"study {study.study_name!r} was sampled with {was}, this version samples with {now}; "
            "resume it with the version that made it, or pass --study_name to start a new one"
        )


def sweep_info(sweep: dict, study_name: str) -> SweepInfo:
    """What W&B's scheduler hands a user's `optimizer` factory; offline the sweep id is the study name."""
    return SweepInfo(
        id=study_name, name=sweep.get("name") or study_name, entity=sweep.get("entity") or "",
        project=sweep.get("project") or "", config=sweep, controller_run_name="",
    )  # fmt: skip


def optuna_search(sweep: dict, study_name: str) -> Search:
    """`scheduler: {engine: optuna}`: the pieces W&B's `build_optuna_optimizer` assembles, by its loaders."""
    block = sweep["scheduler"]
    info = sweep_info(sweep, study_name)
    source = block.get("source", "")
    if ("optimizer" in block or "search_space" in block) and source and not Path(source).is_file():
        raise ConfigError(f"scheduler.source {source!r} not found (it is read relative to the current directory)")
    try:
        constructor, distributions = None, None
        if "search_space" in block:
            constructor = load(wandb_optuna.load_trial_constructor, source, block["search_space"])
        else:
            distributions = wandb_optuna.search_space_from_sweep_config(sweep["parameters"])
        terminator = None
        if block.get("optimizer"):
            study, terminator = load(wandb_client.load_optimizer_config, source, block["optimizer"], optuna.Study, info)
        else:
            study = wandb_optuna.create_study_from_sweep_config(sweep)
        options = wandb_optuna.OptunaOptions(study, distributions, constructor, terminator)
        wandb_optuna.make_optimizer(info, options).validate_sweep_objective()
    except (ValueError, wandb.Error) as error:
        raise ConfigError(f"scheduler: {one_line(error)}") from None
    if constructor and sweep.get("parameters"):
        print(
            "note: `parameters` are not searched: scheduler.search_space defines the space (as in W&B)", file=sys.stderr
        )
    directions = [d.name.lower() for d in study.directions]
    if len(directions) > 1 and not isinstance(study.pruner, optuna.pruners.NopPruner):
        raise ConfigError(
            f"scheduler.optimizer: a multi-objective study cannot be pruned (Optuna's pruners rank one value), "
            f"but its pruner is {type(study.pruner).__name__}; create it with pruner=optuna.pruners.NopPruner()"
        )
    if constructor:
        draw = constructor
    else:
        draw = lambda trial: {n: sf.suggest_distribution(trial, n, d) for n, d in distributions.items()}  # noqa: E731
    settings = None
    if block.get("optimizer"):
        make_sampler = lambda seed: study.sampler  # the factory's own (seeded there), shared by the workers
    else:  # W&B's default study samples with Optuna's default sampler (TPE): pinned, seeded here with --seed
        make_sampler = lambda seed: sf.tpe_sampler(seed, multi_objective=len(directions) > 1)
        settings = tpe_record(len(directions) > 1)
    return Search(directions, sf.metric_names(sweep), study.pruner, make_sampler, draw, terminator, settings)


def load(loader, source: str, name: str, *args):
    """A W&B loader, with a `source` that does not import (syntax error, missing module) as a ValueError."""
    try:
        return loader(source, name, *args)
    except ValueError:
        raise
    except Exception as error:  # executing the user's file or factory: anything it raises is its fault
        raise ValueError(f"{source!r} failed while loading {name!r}: {type(error).__name__}: {error}") from None


def one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
