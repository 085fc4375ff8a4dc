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
PARAMETER_KEYS = ("value", "values", "distribution", "min", "max", "q")  # `probabilities`, `mu`, ... not translated
METRIC_KEYS = ("name", "goal")  # `target` (stop the sweep at a value) is not translated
# the macros `wandb agent` expands (wandb.sdk.launch.sweeps.utils); `${envvar:NAME}` is expanded too
MACROS = (
    "env", "interpreter", "program", "args", "args_no_equals", "args_no_hyphens", "args_no_boolean_flags",
    "args_json", "args_json_file", "args_append_hydra", "args_override_hydra",
)  # fmt: skip
SUBCOMMANDS = ("fit", "validate", "test", "predict")


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
    if isinstance(metric, dict) and (extra := sorted(set(metric) - set(METRIC_KEYS))):
        raise ConfigError(
            f"sweep file {path}: metric key {extra[0]!r} is not translated; known: {', '.join(METRIC_KEYS)}"
        )
    if (
        not isinstance(metric, dict)
        or not metric.get("name")
        or metric.get("goal", "minimize") not in ("minimize", "maximize")
    ):
        raise ConfigError(f"sweep file {path}: metric needs a name and goal minimize or maximize")
    if not isinstance(sweep.get("parameters"), dict) or not sweep["parameters"]:
        raise ConfigError(f"sweep file {path}: parameters must be a non-empty mapping of CLI keys")
    for name, spec in sweep["parameters"].items():
        distribution(name, spec, sweep["method"])
    check_command(sweep, path)
    cap = sweep.get("run_cap")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise ConfigError(f"sweep file {path}: run_cap must be a positive integer, got {cap!r}")
    pruner(sweep)
    return sweep


def check_command(sweep: dict, path: Path) -> None:
    """`program` a path, `command` (optional) a non-empty list of strings, as `wandb agent` requires."""
    if not isinstance(sweep.get("program", "cli.py"), str) or not sweep.get("program", "cli.py"):
        raise ConfigError(f"sweep file {path}: program must be a script path such as cli.py")
    example = "[${env}, ${interpreter}, ${program}, fit, --config, configs/x.yaml, ${args}]"
    command = sweep.get("command", DEFAULT_COMMAND)
    if not isinstance(command, list) or not command or not all(isinstance(c, (str, int, float)) for c in command):
        raise ConfigError(f"sweep file {path}: command must be a non-empty list of strings, e.g. {example}")
    if Path(sweep.get("program", "cli.py")).name == "cli.py" and not set(map(str, command)) & set(SUBCOMMANDS):
        raise ConfigError(
            f"sweep file {path}: command must name a cli.py subcommand ({', '.join(SUBCOMMANDS)}), e.g. {example}"
        )
    for chunk in map(str, command):
        if chunk.startswith("${") and chunk.endswith("}") and chunk[2:-1] not in MACROS:
            if not chunk.startswith("${envvar:"):
                raise ConfigError(f"sweep file {path}: unknown macro {chunk!r} in command; known: {', '.join(MACROS)}")


def distribution(name: str, spec: dict, method: str) -> str:
    """The W&B distribution of one parameter (inferred as W&B does when not given)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"parameter {name!r}: expected a mapping with value, values or a distribution")
    if "value" in spec and len(spec) > 1:
        other = sorted(set(spec) - {"value"})[0]
        raise ConfigError(f"parameter {name!r}: `value` (a constant) cannot be combined with {other!r}")
    if "value" in spec:
        return "constant"
    kind = spec.get("distribution") or ("categorical" if "values" in spec else None)
    if kind is None and "min" in spec and "max" in spec:
        kind = "int_uniform" if all(isinstance(spec[k], int) for k in ("min", "max")) else "uniform"
    if kind not in DISTRIBUTIONS:
        raise ConfigError(
            f"parameter {name!r}: distribution {kind!r} is not translated; use one of: {', '.join(DISTRIBUTIONS)}"
        )
    unknown = sorted(set(spec) - set(PARAMETER_KEYS))
    if unknown:
        raise ConfigError(
            f"parameter {name!r}: key {unknown[0]!r} is not translated; known: {', '.join(PARAMETER_KEYS)}"
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


def wandb_env(sweep: dict) -> dict[str, str]:
    """`project` and `entity` of the sweep file, as `wandb agent` hands them to its runs."""
    keys = {"project": "WANDB_PROJECT", "entity": "WANDB_ENTITY"}
    return {env: str(sweep[key]) for key, env in keys.items() if sweep.get(key)}


def trial_budget(sweep: dict) -> int | None:
    """Trials the sweep starts: grid, the product size capped by run_cap; random and bayes, run_cap
    (None = until stopped). The runner stops asking for trials once this many have started."""
    cap = sweep.get("run_cap")
    if sweep["method"] == "grid":
        size = len(grid_points(sweep))
        return min(size, cap) if cap else size
    return cap
