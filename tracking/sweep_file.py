"""Read a W&B sweep file and translate it to Optuna: sampler, pruner, direction, trial budget and
one `suggest` per parameter. Anything that cannot be translated faithfully is a ConfigError.

W&B's sweep-config format: https://docs.wandb.ai/guides/sweeps/sweep-config-keys
"""

import itertools
import math
from pathlib import Path

import optuna
import yaml

from lightning_modules.errors import ConfigError

METHODS = ("grid", "random", "bayes")
DISTRIBUTIONS = (
    "constant", "categorical", "int_uniform", "uniform", "q_uniform",
    "log_uniform", "log_uniform_values", "q_log_uniform_values",
)  # fmt: skip
TOP_KEYS = {"program", "method", "metric", "parameters", "command", "early_terminate", "run_cap", "name",
            "description", "project", "entity"}  # fmt: skip
DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]


def load_sweep(path: str | Path) -> dict:
    """Parse and check a sweep file; every problem is one line naming the valid choices."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sweep file {str(path)!r} not found")
    try:
        sweep = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"sweep file {path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(sweep, dict):
        raise ConfigError(f"sweep file {path} must be a mapping with keys program, method, metric, parameters")
    unknown = sorted(set(sweep) - TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"sweep file {path}: key {unknown[0]!r} is not translated; known: {', '.join(sorted(TOP_KEYS))}"
        )
    if sweep.get("method") not in METHODS:
        raise ConfigError(f"sweep file {path}: method {sweep.get('method')!r}; choose one of: {', '.join(METHODS)}")
    metric = sweep.get("metric") or {}
    if not metric.get("name") or metric.get("goal", "minimize") not in ("minimize", "maximize"):
        raise ConfigError(f"sweep file {path}: metric needs a name and goal minimize or maximize")
    if not isinstance(sweep.get("parameters"), dict) or not sweep["parameters"]:
        raise ConfigError(f"sweep file {path}: parameters must be a non-empty mapping of CLI keys")
    for name, spec in sweep["parameters"].items():
        distribution(name, spec, sweep["method"])
    pruner(sweep)
    return sweep


def distribution(name: str, spec: dict, method: str) -> str:
    """The W&B distribution of one parameter (inferred as W&B does when not given)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"parameter {name!r}: expected a mapping with value, values or a distribution")
    if "value" in spec:
        return "constant"
    kind = spec.get("distribution") or ("categorical" if "values" in spec else None)
    if kind is None and "min" in spec and "max" in spec:
        kind = "int_uniform" if all(isinstance(spec[k], int) for k in ("min", "max")) else "uniform"
    if kind not in DISTRIBUTIONS:
        raise ConfigError(
            f"parameter {name!r}: distribution {kind!r} is not translated; use one of: {', '.join(DISTRIBUTIONS)}"
        )
    if method == "grid" and kind not in ("constant", "categorical"):
        raise ConfigError(f"parameter {name!r}: a grid sweep needs `values` (or `value`), got distribution {kind!r}")
    if kind == "categorical" and not spec.get("values"):
        raise ConfigError(f"parameter {name!r}: categorical needs a non-empty `values` list")
    if kind not in ("constant", "categorical") and not ("min" in spec and "max" in spec):
        raise ConfigError(f"parameter {name!r}: distribution {kind!r} needs min and max")
    return kind


def suggest(trial: optuna.Trial, name: str, spec: dict, method: str):
    """Draw one parameter with the Optuna call that matches its W&B distribution."""
    kind = distribution(name, spec, method)
    if kind == "constant":
        return spec["value"]
    if kind == "categorical":
        return trial.suggest_categorical(name, spec["values"])
    low, high = spec["min"], spec["max"]
    if kind == "int_uniform":
        return trial.suggest_int(name, low, high)
    if kind == "uniform":
        return trial.suggest_float(name, low, high)
    if kind == "q_uniform":
        return trial.suggest_float(name, low, high, step=spec.get("q", 1.0))
    if kind == "log_uniform":  # W&B: min and max are natural-log exponents
        return trial.suggest_float(name, math.exp(low), math.exp(high), log=True)
    value = trial.suggest_float(name, low, high, log=True)  # log_uniform_values, q_log_uniform_values
    if kind == "q_log_uniform_values":  # Optuna has no step on a log scale: round as W&B does
        q = spec.get("q", 1.0)
        value = round(value / q) * q
        trial.set_user_attr(f"quantized/{name}", value)
    return value


def grid_points(sweep: dict) -> list[dict]:
    """The full product of a grid sweep's `values` parameters, in file order (constants excluded); a sweep
    built in code (tracking/reseed.py) may list its points instead of a product, under `points`."""
    if "points" in sweep:
        return [dict(point) for point in sweep["points"]]
    space = {n: s["values"] for n, s in sweep["parameters"].items() if "values" in s}
    return [dict(zip(space, combo)) for combo in itertools.product(*space.values())]


class QueuedGridSampler(optuna.samplers.GridSampler):
    """GridSampler over the full product whose points the sweep runner queues once, tagged with their
    grid ids (tracking/sweep.py `queue_grid`). The runner ends the sweep when the queue is empty:
    GridSampler's own `after_trial` calls `study.stop()`, which works only inside `study.optimize`."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def sampler(sweep: dict, seed: int = 0) -> optuna.samplers.BaseSampler:
    """grid -> GridSampler over the full product, random -> RandomSampler, bayes -> TPESampler."""
    if sweep["method"] == "grid":
        space = {n: s["values"] for n, s in sweep["parameters"].items() if "values" in s}
        return QueuedGridSampler(space, seed=seed)
    if sweep["method"] == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruner(sweep: dict) -> optuna.pruners.BasePruner:
    """early_terminate hyperband -> HyperbandPruner (resources = number of validations); none -> NopPruner."""
    early = sweep.get("early_terminate")
    if not early:
        return optuna.pruners.NopPruner()
    if early.get("type") != "hyperband":
        raise ConfigError(f"early_terminate type {early.get('type')!r} is not translated; use hyperband")
    unknown = sorted(set(early) - {"type", "min_iter", "max_iter", "eta", "s", "strict"})
    if unknown:
        raise ConfigError(f"early_terminate key {unknown[0]!r} is not translated; use min_iter, max_iter, eta")
    if "s" in early or early.get("strict"):
        raise ConfigError("early_terminate: `s` and `strict` have no Optuna equivalent; use min_iter, max_iter, eta")
    return optuna.pruners.HyperbandPruner(
        min_resource=early.get("min_iter", 1), max_resource=early.get("max_iter", "auto"),
        reduction_factor=early.get("eta", 3),
    )  # fmt: skip


def direction(sweep: dict) -> str:
    return sweep["metric"].get("goal", "minimize")


def trial_budget(sweep: dict) -> int | None:
    """Grid: the product size (capped by run_cap); random and bayes: run_cap (None = until stopped)."""
    cap = sweep.get("run_cap")
    if sweep["method"] == "grid":
        size = len(grid_points(sweep))
        return min(size, cap) if cap else size
    return cap
