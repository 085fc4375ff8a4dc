"""Read a W&B sweep file and translate it to Optuna: sampler, pruner, directions, trial budget and
one `suggest` per parameter. Anything that cannot be translated faithfully is a ConfigError.

Parameter distributions and objective directions are W&B's own (`sweep_parameter_to_distribution`,
`sweep_directions` in wandb.sdk.sweeps.scheduler.optuna, the translation W&B's Optuna sweep scheduler
uses), so a file means the same study here as under `wandb sweep-scheduler`. Our own code is kept only
where W&B's functions do not apply, each place saying why. The `scheduler:` block itself (engine,
optimizer, search_space, source) is read in sweep/search.py.

W&B's sweep-config format: https://docs.wandb.ai/guides/sweeps/sweep-config-keys
"""

import copy
import functools
import itertools
import json
import math
import stat
import warnings
from pathlib import Path

import optuna
import yaml
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from wandb.sdk.sweeps.scheduler import optuna as wandb_optuna

from pe_core.errors import ConfigError
from pe_sweeps.compare.preconditions import parse_preconditions

METHODS = ("grid", "random", "bayes", "custom")  # custom: W&B's method for scheduler engine optuna
DISTRIBUTIONS = (
    "constant", "categorical", "int_uniform", "uniform", "q_uniform",
    "log_uniform_values", "q_log_uniform_values",
)  # fmt: skip
# W&B's sweep schema refuses these (min/max as base-e exponents) and names their replacement
EXPONENT_BOUNDS = {"log_uniform": "log_uniform_values", "inv_log_uniform": "inv_log_uniform_values",
                   "q_log_uniform": "q_log_uniform_values"}  # fmt: skip
TOP_KEYS = {"program", "method", "metric", "metrics", "parameters", "command", "early_terminate", "run_cap", "name",
            "description", "project", "entity", "scheduler", "compare"}  # fmt: skip
# `compare:` is this runner's own key (W&B's schema has none): what `cli.py compare` judges the sweep's runs by,
# declared before they run (compare/statistics.py `judge`)
COMPARE_KEYS = ("margin", "precondition", "primary")
ENGINES = ("wandb", "optuna")  # `scheduler.engine`s the runner runs (W&B's scheduler also has `ax`)
SCHEDULER_KEYS = ("engine", "optimizer", "search_space", "source")
DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]
PARAMETER_KEYS = ("value", "values", "distribution", "min", "max", "q")  # `probabilities`, `mu`, ... not translated
METRIC_KEYS = ("name", "goal")  # `target` (stop the sweep at a value) is not translated
# the macros `wandb agent` expands (wandb.sdk.launch.sweeps.utils); `${envvar:NAME}` is expanded too
MACROS = (
    "env", "interpreter", "program", "args", "args_no_equals", "args_no_hyphens", "args_no_boolean_flags",
    "args_json", "args_json_file", "args_append_hydra", "args_override_hydra",
)  # fmt: skip
SUBCOMMANDS = ("fit", "validate", "test", "predict")
ARGS_MACROS = tuple(m for m in MACROS if m.startswith("args"))  # the macros that hand a trial its parameters
# Limits checked before anything is written: a sweep file is a few kB; a grid of 10^9 points or a YAML alias
# bomb (a few lines that expand to billions of values) would exhaust memory and leave a study behind.
MAX_FILE_BYTES = 1_000_000
MAX_VALUES = 100_000  # values in the file once its YAML aliases are expanded
MAX_GRID_POINTS = 100_000
SEED_PARAMETERS = ("seed_everything", "data.seed", "data.init_args.seed")  # a run's training and data seeds


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True) if key_node.tag != "tag:yaml.org,2002:merge" else "<<"
            if key != "<<" and isinstance(key, str | int | float | bool) and key in seen:
                raise ConfigError(f"key {key!r} appears twice in one mapping (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path):
    """The file's YAML, within MAX_FILE_BYTES and MAX_VALUES, with unique keys; ConfigError otherwise."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"sweep file {path} is {size:,} bytes; a sweep file is at most {MAX_FILE_BYTES:,}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"sweep file {path} is not UTF-8 text (byte {error.start}): is it a YAML file?") from None
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)
    except ConfigError as error:
        raise ConfigError(f"sweep file {path}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"sweep file {path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if count_values(data, MAX_VALUES) > MAX_VALUES:
        raise ConfigError(
            f"sweep file {path} expands to more than {MAX_VALUES:,} values (YAML aliases repeated?); "
            "a sweep file lists its values"
        )
    return data


def count_values(data, budget: int) -> int:
    """How many values `data` holds with shared (aliased) parts counted each time, stopping past `budget`."""
    count, stack = 0, [data]
    while stack and count <= budget:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
    return count


def load_sweep(path: str | Path) -> dict:
    """Parse and check a sweep file; every problem is one line naming the valid choices."""
    path = Path(path)
    check_regular_file(path)
    sweep = read_yaml(path)
    if not isinstance(sweep, dict):
        raise ConfigError(f"sweep file {path} must be a mapping with keys program, method, metric, parameters")
    unknown = sorted(set(sweep) - TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"sweep file {path}: key {unknown[0]!r} is not translated; known: {', '.join(sorted(TOP_KEYS))}"
        )
    for key in ("name", "description", "project", "entity"):
        if key in sweep and not isinstance(sweep[key], str):
            raise ConfigError(f"sweep file {path}: {key} must be a string, got {sweep[key]!r}")
    if sweep.get("method") not in METHODS:
        raise ConfigError(f"sweep file {path}: method {sweep.get('method')!r}; choose one of: {', '.join(METHODS)}")
    engine = check_scheduler(sweep, path)
    check_method(sweep["method"], engine, path)
    for metric in objectives(sweep, path):
        check_metric(metric, path)
    if engine == "optuna":
        check_optuna_engine(sweep, path)
    elif not isinstance(sweep.get("parameters"), dict) or not sweep["parameters"]:
        raise ConfigError(f"sweep file {path}: parameters must be a non-empty mapping of CLI keys")
    for name, spec in (sweep.get("parameters") or {}).items():
        distribution(name, spec, sweep["method"])
        if engine == "optuna" and "search_space" not in sweep["scheduler"]:
            wandb_distribution(name, spec)  # W&B's Optuna engine refuses what it cannot translate
    check_seeds_not_searched(sweep, path)
    check_compare(sweep, path)
    check_command(sweep, path)
    check_grid_size(sweep, path)
    cap = sweep.get("run_cap")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise ConfigError(f"sweep file {path}: run_cap must be a positive integer, got {cap!r}")
    pruner(sweep)
    check_wandb_schema(sweep, path)
    return sweep


def check_regular_file(path: Path) -> None:
    """A sweep file is a regular file: a folder, a named pipe (reading it would wait for a writer) or a device is
    named as what it is."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"sweep file {str(path)!r} not found") from None
    except OSError as error:  # e.g. a folder on the way that cannot be searched
        raise ConfigError(f"sweep file {str(path)!r} cannot be read: {error.strerror}") from None
    kinds = ((stat.S_ISDIR, "is a folder"), (stat.S_ISFIFO, "is a named pipe (FIFO)"), (stat.S_ISSOCK, "is a socket"),
             (stat.S_ISCHR, "is a device"), (stat.S_ISBLK, "is a device"))  # fmt: skip
    what = next((words for test, words in kinds if test(mode)), None if stat.S_ISREG(mode) else "is not a file")
    if what:
        raise ConfigError(f"sweep file {str(path)!r} {what}, not a YAML file")


def check_seeds_not_searched(sweep: dict, path: Path) -> None:
    """A seed is not a hyperparameter: a random, bayes or Optuna search over seeds would keep the luckiest one
    as the best setting. Grid enumerates seeds (every one runs, none is chosen); the other methods take one."""
    if sweep["method"] == "grid":
        return
    for key in SEED_PARAMETERS:
        spec = (sweep.get("parameters") or {}).get(key)
        if isinstance(spec, dict) and "value" not in spec and len({repr(v) for v in spec.get("values") or [0, 1]}) > 1:
            raise ConfigError(
                f"sweep file {path}: method {sweep['method']} would search {key} as a hyperparameter and keep the "
                f"luckiest seed; give it one value (`{key}: {{value: 0}}`) and re-run the best setting with fresh "
                "seeds (`cli.py sweep FILE --reseed N`), or use method grid to run every seed"
            )


def check_method(method: str, engine: str, path: Path) -> None:
    """As W&B's sweep schema has it: scheduler engine optuna takes method custom only (the study's sampler
    decides), every other sweep grid, random or bayes."""
    if engine == "optuna" and method != "custom":
        raise ConfigError(
            f"sweep file {path}: scheduler.engine optuna takes method custom (W&B's sweep schema: the study's "
            f"sampler searches), got method {method!r}"
        )
    if engine != "optuna" and method == "custom":
        raise ConfigError(
            f"sweep file {path}: method custom needs scheduler: {{engine: optuna}} (it names no search of its own); "
            "else choose one of: grid, random, bayes"
        )


def check_wandb_schema(sweep: dict, path: Path) -> None:
    """W&B's own validation of a sweep file (`sweeps.schema_violations_from_proposed_config`, the code W&B's
    local controller runs), when its `sweeps` package is installed (CI and scripts/setup.sh install it): a
    file this runner accepts is then one `wandb sweep` accepts. Without the package only our checks run."""
    with warnings.catch_warnings():  # its pydantic models warn about renamed config keys on import
        warnings.simplefilter("ignore")
        try:
            import sweeps as wandb_sweeps  # W&B's package, not this project's sweeps/ folder (no __init__.py)
        except ImportError:
            return
    validate = getattr(wandb_sweeps, "schema_violations_from_proposed_config", None)
    if validate is None:  # this project's sweeps/ folder, imported as a namespace package
        return
    spec = {k: v for k, v in sweep.items() if k not in ("points", "compare")}  # our own keys: the reseed grid, compare
    violations = validate(spec)
    if violations:
        raise ConfigError(f"sweep file {path}: W&B's sweep schema refuses it: {violations[0]}")


def check_compare(sweep: dict, path: Path) -> None:
    """`compare: {margin: M, precondition: P, primary: METRIC}`: the equivalence margin of compare's verdicts (a
    positive number, or one per metric: {METRIC: M}), the cells' precondition (compare/preconditions.py: a string or
    a list of them) and the primary metric; anything else is one line."""
    if "compare" not in sweep:
        return
    block = sweep["compare"]
    if not isinstance(block, dict) or not block:
        raise ConfigError(f"sweep file {path}: compare must be a mapping with keys {', '.join(COMPARE_KEYS)}")
    if extra := sorted(set(block) - set(COMPARE_KEYS), key=str):
        raise ConfigError(f"sweep file {path}: compare key {extra[0]!r} is unknown; known: {', '.join(COMPARE_KEYS)}")
    margins = block.get("margin")
    declared = margins.items() if isinstance(margins, dict) else [("", margins)] if "margin" in block else []
    for metric, margin in declared:
        where = f"compare.margin{'.' + str(metric) if metric else ''}"
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 < margin < math.inf:
            raise ConfigError(f"sweep file {path}: {where} {margin!r}: an equivalence margin is a positive number "
                              "(or one per metric: {METRIC: M})")  # fmt: skip
    if "precondition" in block:
        try:
            parse_preconditions(block["precondition"], "compare.precondition")
        except ConfigError as error:
            raise ConfigError(f"sweep file {path}: {error}") from None
    if "primary" in block and (not isinstance(block["primary"], str) or not block["primary"]):
        raise ConfigError(f"sweep file {path}: compare.primary must name a metric, got {block['primary']!r}")


def check_grid_size(sweep: dict, path: Path) -> None:
    """A grid's size is counted before its points are: at most MAX_GRID_POINTS."""
    if sweep["method"] != "grid" or "points" in sweep:
        return
    size = math.prod(len(s["values"]) for s in sweep["parameters"].values() if "values" in s)
    if size > MAX_GRID_POINTS:
        raise ConfigError(
            f"sweep file {path}: the grid has {size:,} points; at most {MAX_GRID_POINTS:,} (split it with --set, "
            "or use method random with run_cap)"
        )


def check_scheduler(sweep: dict, path: Path) -> str:
    """The `scheduler:` block of W&B's client-side sweep scheduler (wandb>=0.31): its engine, `wandb`
    when the block is absent (W&B's server-side search, as before the block existed)."""
    if "scheduler" not in sweep:
        return "wandb"
    block = sweep["scheduler"]
    if not isinstance(block, dict):
        raise ConfigError(f"sweep file {path}: scheduler must be a mapping with keys {', '.join(SCHEDULER_KEYS)}")
    if extra := sorted(set(block) - set(SCHEDULER_KEYS)):
        raise ConfigError(
            f"sweep file {path}: scheduler key {extra[0]!r} is unknown; known: {', '.join(SCHEDULER_KEYS)}"
        )
    engine = block.get("engine")
    if engine not in ENGINES:
        raise ConfigError(
            f"sweep file {path}: scheduler.engine {engine!r} is not supported by cli.py sweep; choose one of: "
            f"{', '.join(ENGINES)} (engine ax runs online only, with `wandb sweep-scheduler`)"
        )
    if engine == "wandb" and (used := sorted(set(block) - {"engine"})):
        raise ConfigError(f"sweep file {path}: scheduler.{used[0]} is read by engine optuna only, not engine wandb")
    for key in ("optimizer", "search_space"):
        if key in block and not block.get("source"):  # as W&B's sweep schema and its scheduler require
            raise ConfigError(f"sweep file {path}: scheduler.{key} needs scheduler.source, the python file that "
                              f"defines {block[key]!r}")  # fmt: skip
    return engine


def objectives(sweep: dict, path: Path) -> list:
    """`metric` (one objective) or `metrics` (several, W&B's Optuna and Ax engines only), never both."""
    if "metric" in sweep and "metrics" in sweep:
        raise ConfigError(f"sweep file {path}: give either metric (one objective) or metrics (several), not both")
    if "metrics" not in sweep:
        return [sweep.get("metric") or {}]
    metrics = sweep["metrics"]
    if (sweep.get("scheduler") or {}).get("engine") != "optuna":
        raise ConfigError(f"sweep file {path}: metrics (several objectives) needs scheduler: {{engine: optuna}}")
    if not isinstance(metrics, list) or len(metrics) < 2:
        raise ConfigError(
            f"sweep file {path}: metrics must list two or more {{name, goal}} mappings (W&B's schema; use metric "
            "for one objective)"
        )
    return metrics


def check_metric(metric, path: Path) -> None:
    if isinstance(metric, dict) and (extra := sorted(set(metric) - set(METRIC_KEYS))):
        raise ConfigError(
            f"sweep file {path}: metric key {extra[0]!r} is not translated; known: {', '.join(METRIC_KEYS)}"
        )
    if (
        not isinstance(metric, dict)
        or not isinstance(metric.get("name"), str)
        or not metric.get("name")
        or metric.get("goal", "minimize") not in ("minimize", "maximize")
    ):
        raise ConfigError(f"sweep file {path}: metric needs a name and goal minimize or maximize")
    if metric["name"].startswith("test/"):  # the study would select its trials (and reseed's choice) on it
        raise ConfigError(
            f"sweep file {path}: metric {metric['name']!r} is a test-fold metric, which is reported at the end "
            "(--run.test_at_end, compare --metric) and never selected on; optimise a val/ metric"
        )


def check_optuna_engine(sweep: dict, path: Path) -> None:
    """What W&B's Optuna engine does not read would be silently ignored here too: refused instead."""
    if sweep.get("early_terminate"):
        raise ConfigError(
            f"sweep file {path}: early_terminate is not read by scheduler engine optuna; give the study a "
            "pruner in scheduler.optimizer instead"
        )
    has_space = "search_space" in sweep["scheduler"]
    if not has_space and (not isinstance(sweep.get("parameters"), dict) or not sweep["parameters"]):
        raise ConfigError(f"sweep file {path}: parameters must be a non-empty mapping (or give scheduler.search_space)")


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
    if not {f"${{{m}}}" for m in ARGS_MACROS} & set(map(str, command)):
        raise ConfigError(
            f"sweep file {path}: command passes no parameters (none of "
            f"{', '.join('${' + m + '}' for m in ARGS_MACROS[:2])}, ...): every trial would run the same command; "
            f"e.g. {example}"
        )


def distribution(name: str, spec: dict, method: str) -> str:
    """The W&B distribution of one parameter (inferred as W&B does when not given)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"parameter {name!r}: expected a mapping with value, values or a distribution")
    if "value" in spec and len(spec) > 1:
        other = sorted(set(spec) - {"value"})[0]
        raise ConfigError(f"parameter {name!r}: `value` (a constant) cannot be combined with {other!r}")
    if "value" in spec:
        check_values(name, [spec["value"]])
        return "constant"
    kind = spec.get("distribution") or ("categorical" if "values" in spec else None)
    if kind is None and "min" in spec and "max" in spec:
        kind = "int_uniform" if all(isinstance(spec[k], int) for k in ("min", "max")) else "uniform"
    if kind in EXPONENT_BOUNDS:
        raise ConfigError(
            f"parameter {name!r}: {kind} (min/max as base-e exponents) is refused by W&B's sweep schema; use "
            f"{EXPONENT_BOUNDS[kind]} with the limit values (min: exp(min), max: exp(max))"
        )
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
    if kind == "categorical" and (not isinstance(spec.get("values"), list) or not spec["values"]):
        raise ConfigError(
            f"parameter {name!r}: categorical needs a non-empty `values` list, got {spec.get('values')!r}"
        )
    check_values(name, spec_values(spec))
    if kind not in ("constant", "categorical"):
        check_range(name, spec, kind)
    return kind


def check_values(name: str, values: list) -> None:
    """Finite numbers (a NaN or infinite value trains nothing sensible), each value once (a grid would run a
    repeated value twice, a search would weigh it double)."""
    seen = set()
    for value in values:
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"parameter {name!r}: values must be finite numbers, got {value!r}")
        text = json.dumps(value, sort_keys=True, default=repr)
        if text in seen:
            raise ConfigError(f"parameter {name!r}: value {value!r} is listed twice; list each value once")
        seen.add(text)


def check_range(name: str, spec: dict, kind: str) -> None:
    """min < max (W&B's schema: a constant is `value`), numbers (integers for int_uniform), q > 0, and min > 0 on
    a log scale of values."""
    if not ("min" in spec and "max" in spec):
        raise ConfigError(f"parameter {name!r}: distribution {kind!r} needs min and max")
    low, high, q = spec["min"], spec["max"], spec.get("q", 1)
    number = (int,) if kind == "int_uniform" else (int, float)
    for key, value in (("min", low), ("max", high), ("q", q)):
        if not isinstance(value, number) or isinstance(value, bool) or not math.isfinite(value):
            what = "an integer" if number == (int,) else "a number"
            raise ConfigError(f"parameter {name!r}: {key} of {kind} must be {what}, got {value!r}")
    if low >= high:
        raise ConfigError(f"parameter {name!r}: min {low} must be less than max {high} (a constant is `value`)")
    if q <= 0:
        raise ConfigError(f"parameter {name!r}: q must be > 0, got {q}")
    if kind in ("log_uniform_values", "q_log_uniform_values") and low <= 0:
        raise ConfigError(f"parameter {name!r}: {kind} needs min > 0 (a log scale of values), got {low}")


def wandb_distribution(name: str, spec: dict) -> BaseDistribution:
    """The Optuna distribution W&B's Optuna sweep scheduler builds for this parameter (W&B's own code)."""
    try:
        return _wandb_distribution(json.dumps(spec, sort_keys=True))
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"parameter {name!r}: W&B's Optuna engine cannot translate it: {error}") from None


@functools.cache
def _wandb_distribution(spec: str) -> BaseDistribution:
    # cached: W&B warns once per parameter when it drops `q`, not once per trial
    return wandb_optuna.sweep_parameter_to_distribution(json.loads(spec))


def suggest_distribution(trial: optuna.Trial, name: str, dist: BaseDistribution):
    """Draw `name` from `dist` with the public `suggest_*` call whose distribution is exactly `dist`."""
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, list(dist.choices))
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    assert isinstance(dist, FloatDistribution), dist
    return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)


def suggest(trial: optuna.Trial, name: str, spec: dict, method: str, engine: str = "wandb"):
    """Draw one parameter from the distribution W&B's Optuna scheduler uses for it. With `engine` wandb
    (W&B's server-side search) two cases keep our own handling, where W&B's Optuna translation differs
    from what W&B's own search does with the same file:
    - a constant is passed through, not sampled: it stays out of grid points and `--set` studies (W&B's
      Optuna engine makes it a one-choice categorical, which draws the same value);
    - `q_log_uniform_values` that Optuna cannot step on a log scale (q != 1 or min < 1): W&B's Optuna
      translation drops q (a log-float space); W&B's server rounds to a multiple of q, and so do we.
    With engine optuna every parameter is exactly W&B's Optuna translation."""
    kind = distribution(name, spec, method)
    if engine == "optuna":
        return suggest_distribution(trial, name, wandb_distribution(name, spec))
    if kind == "constant":
        return spec["value"]
    dist = wandb_distribution(name, spec)
    value = suggest_distribution(trial, name, dist)
    if kind == "q_log_uniform_values" and isinstance(dist, FloatDistribution):
        q = spec.get("q", 1)
        value = round(value / q) * q
        trial.set_user_attr(f"quantized/{name}", value)
    return value


def grid_points(sweep: dict) -> list[dict]:
    """The full product of a grid sweep's `values` parameters, in file order (constants excluded); a sweep
    built in code (sweep/reseed.py) may list its points instead of a product, under `points`."""
    if "points" in sweep:
        return [dict(point) for point in sweep["points"]]
    space = {n: s["values"] for n, s in sweep["parameters"].items() if "values" in s}
    return [dict(zip(space, combo)) for combo in itertools.product(*space.values())]


class QueuedGridSampler(optuna.samplers.GridSampler):
    """GridSampler over the full product whose points the sweep runner queues once, tagged with their
    grid ids (sweep/study_protocol.py `queue_grid`). The runner ends the sweep when the queue is empty:
    GridSampler's own `after_trial` calls `study.stop()`, which works only inside `study.optimize`."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def sampler(sweep: dict, seed: int = 0) -> optuna.samplers.BaseSampler:
    """grid -> GridSampler over the full product, random -> RandomSampler, bayes -> TPESampler (pinned)."""
    if sweep["method"] == "grid":
        space = {n: s["values"] for n, s in sweep["parameters"].items() if "values" in s}
        return QueuedGridSampler(space, seed=seed)
    if sweep["method"] == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return tpe_sampler(seed, multi_objective=len(directions(sweep)) > 1)


def tpe_settings(multi_objective: bool) -> dict:
    """Every TPESampler setting that a library default would otherwise choose, written out: Optuna 5.0 changed
    the defaults of `multivariate` and `constant_liar`, so the same file and --seed drew other trials from
    trial 10 on under Optuna 4.9 and 5.1. These are Optuna 5's own defaults (multivariate for one objective,
    independent for several); with them Optuna 5.0 and 5.1 draw the same trials and 4.9 does not (hence
    `optuna>=5.0,<6`). `gamma` and `weights` (callables) are left to Optuna 5, which deprecated them with the
    other `consider_*` / `prior_weight` arguments: fixed until their removal in 6.0."""
    return {
        "n_startup_trials": 10, "n_ei_candidates": 24, "multivariate": not multi_objective, "group": False,
        "constant_liar": True, "consider_prior": True, "prior_weight": 1.0, "consider_magic_clip": True,
        "consider_endpoints": False,
    }  # fmt: skip


DEPRECATED_TPE = ("consider_prior", "prior_weight", "consider_magic_clip", "consider_endpoints")


def tpe_sampler(seed: int, multi_objective: bool) -> optuna.samplers.TPESampler:
    """A TPESampler with `tpe_settings`; the deprecated ones are passed at their only value, quietly."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, message=f"`({'|'.join(DEPRECATED_TPE)})`")
        return optuna.samplers.TPESampler(seed=seed, **tpe_settings(multi_objective))


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
    return ValidationHyperbandPruner(
        min_resource=early.get("min_iter", 1), max_resource=early.get("max_iter", "auto"),
        reduction_factor=early.get("eta", 3),
    )  # fmt: skip


def fixed_keys(sweep: dict) -> set[str] | None:
    """The parameters every trial gets the same value of (a constant, `--set` included, or a one-value list);
    None when a `scheduler.search_space` function defines the space (the file cannot say)."""
    if "search_space" in (sweep.get("scheduler") or {}):
        return None
    specs = sweep.get("parameters") or {}
    return {k for k, s in specs.items() if "value" in s or len(s.get("values") or [None, None]) < 2}


def spec_values(spec: dict) -> list:
    """The values a parameter's spec lists: its one `value`, else its `values` (none for a distribution)."""
    return [spec["value"]] if "value" in spec else spec.get("values") or []


def same_for_every_trial(sweep: dict, option: str) -> bool:
    """Every trial's command gives `option` (`data.preset`) the same value: no parameter the sweep varies is
    the option, inside it or around it (`data` as a whole, or `model.arch.encoding_options` for
    `model.arch.encoding_options.base`)."""
    fixed = fixed_keys(sweep)
    if fixed is None:
        return False
    moving = set(sweep.get("parameters") or {}) - fixed
    return not any(p == option or p.startswith(f"{option}.") or option.startswith(f"{p}.") for p in moving)


def varied(sweep: dict, params: dict) -> dict:
    """The drawn `params` that the sweep varies (a constant or a one-value list does not), in file order;
    every drawn parameter when a `scheduler.search_space` function defines the space."""
    fixed = fixed_keys(sweep)
    return {k: v for k, v in params.items() if fixed is None or k not in fixed}


class ValidationHyperbandPruner(optuna.pruners.HyperbandPruner):
    """HyperbandPruner whose resource is the number of validations (W&B's hyperband "iteration"), while
    the trials report their intermediate values at the global step (the x axis W&B plots them against)."""

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        by_validation = copy.copy(trial)
        values = [v for _, v in sorted(trial.intermediate_values.items())]
        by_validation.intermediate_values = {i + 1: v for i, v in enumerate(values)}
        return super().prune(study, by_validation)


def engine(sweep: dict) -> str:
    """`scheduler.engine`; `wandb` (W&B's own search, our translation) when the file has no block."""
    return (sweep.get("scheduler") or {}).get("engine", "wandb")


def directions(sweep: dict) -> list[str]:
    """One Optuna direction per objective (`metric` or `metrics`), by W&B's own `sweep_directions`."""
    return wandb_optuna.sweep_directions(sweep)


def metric_names(sweep: dict) -> list[str]:
    """The objective metrics, in file order: `metrics` (several) or `metric` (one)."""
    return [m["name"] for m in sweep.get("metrics") or [sweep["metric"]]]


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
