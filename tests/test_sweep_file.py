"""W&B sweep file -> Optuna translation: grid product, distributions, pruner, and clear errors."""

import math
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from lightning_modules.errors import ConfigError
from tracking import sweep_file as sf

SWEEPS = sorted(Path(__file__).resolve().parents[1].glob("sweeps/*.yaml"))


def write(tmp_path, sweep: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def base(method="grid", **parameters) -> dict:
    return {"program": "cli.py", "method": method, "metric": {"name": "val/acc", "goal": "maximize"},
            "parameters": parameters or {"model.encoding": {"values": ["rope", "alibi"]}}}  # fmt: skip


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_every_sweep_file_loads(path):
    sweep = sf.load_sweep(path)
    assert sf.trial_budget(sweep) is None or sf.trial_budget(sweep) >= 1


def test_grid_is_the_exact_product(tmp_path):
    sweep = sf.load_sweep(write(tmp_path, base(**{
        "model.encoding": {"values": ["rope", "alibi", "none"]}, "data.task": {"values": ["copy", "sort"]},
        "seed_everything": {"values": [0, 1]}, "model.dim": {"value": 64},
    })))  # fmt: skip
    points = sf.grid_points(sweep)
    assert len(points) == 12 == sf.trial_budget(sweep)
    assert len({tuple(sorted(p.items())) for p in points}) == 12
    assert all("model.dim" not in p for p in points)  # constants are not grid axes
    assert isinstance(sf.sampler(sweep), optuna.samplers.GridSampler)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"values": [1, 2]}, CategoricalDistribution([1, 2])),
        ({"distribution": "categorical", "values": ["a"]}, CategoricalDistribution(["a"])),
        ({"distribution": "int_uniform", "min": 1, "max": 4}, IntDistribution(1, 4)),
        ({"min": 1, "max": 4}, IntDistribution(1, 4)),
        ({"min": 0.1, "max": 0.5}, FloatDistribution(0.1, 0.5)),
        ({"distribution": "uniform", "min": 0.0, "max": 1.0}, FloatDistribution(0.0, 1.0)),
        ({"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.25}, FloatDistribution(0.0, 1.0, step=0.25)),
        ({"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2}, FloatDistribution(1e-4, 1e-2, log=True)),
        ({"distribution": "log_uniform", "min": -4, "max": 0}, FloatDistribution(math.exp(-4), 1.0, log=True)),
        (
            {"distribution": "q_log_uniform_values", "min": 8, "max": 256, "q": 8},
            FloatDistribution(8, 256, log=True),
        ),
    ],
)
def test_each_distribution_maps_to_its_suggest_call(spec, expected):
    trial = optuna.create_study().ask()
    value = sf.suggest(trial, "x", spec, "random")
    assert trial.distributions["x"] == expected
    if spec.get("distribution") == "q_log_uniform_values":
        assert value % 8 == 0


def test_constant_is_not_sampled():
    trial = optuna.create_study().ask()
    assert sf.suggest(trial, "x", {"value": 3}, "random") == 3 and "x" not in trial.distributions


def test_methods_and_goal():
    assert isinstance(sf.sampler(base("random")), optuna.samplers.RandomSampler)
    assert isinstance(sf.sampler(base("bayes")), optuna.samplers.TPESampler)
    assert sf.direction(base()) == "maximize"
    assert sf.trial_budget({**base("random"), "run_cap": 7}) == 7


def test_hyperband_maps_to_optuna():
    pruner = sf.pruner({**base(), "early_terminate": {"type": "hyperband", "min_iter": 2, "eta": 2}})
    assert isinstance(pruner, optuna.pruners.HyperbandPruner)
    assert pruner._min_resource == 2 and pruner._reduction_factor == 2
    assert isinstance(sf.pruner(base()), optuna.pruners.NopPruner)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"method": "evolution"}, "method 'evolution'; choose one of: grid, random, bayes"),
        ({"early_terminate": {"type": "median"}}, "early_terminate type 'median' is not translated"),
        ({"early_terminate": {"type": "hyperband", "s": 2}}, "`s` and `strict` have no Optuna equivalent"),
        ({"metric": {"name": "val/acc", "goal": "up"}}, "goal minimize or maximize"),
        ({"parameters": {"lr": {"distribution": "normal", "mu": 0, "sigma": 1}}}, "distribution 'normal' is not"),
        ({"parameters": {"lr": {"distribution": "uniform", "min": 0, "max": 1}}}, "a grid sweep needs `values`"),
        ({"controller": {"type": "local"}}, "key 'controller' is not translated"),
    ],
)
def test_untranslatable_is_a_clear_error(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("`", "`")):
        sf.load_sweep(write(tmp_path, {**base(), **change}))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        sf.load_sweep(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("method: [grid\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        sf.load_sweep(tmp_path / "bad.yaml")


def test_length_generalization_sweep_covers_the_registry():
    from datamodules.tasks import CHOMSKY_FAMILIES, TASKS
    from lightning_modules.encodings import ENCODINGS

    sweeps = Path(__file__).resolve().parents[1] / "sweeps"
    sweep = sf.load_sweep(sweeps / "length_generalization.yaml")
    assert set(sweep["parameters"]["model.encoding"]["values"]) == set(ENCODINGS)
    chomsky = sf.load_sweep(sweeps / "chomsky.yaml")  # the encoder protocol: every encoding an encoder can run
    assert set(chomsky["parameters"]["model.encoding"]["values"]) == {
        n for n, c in ENCODINGS.items() if not c.causal_only
    }
    tasks = sweep["parameters"]["data.task"]["values"], chomsky["parameters"]["data.task"]["values"]
    assert set(tasks[1]) == {n for n, t in TASKS.items() if t.family in CHOMSKY_FAMILIES}
    assert set(tasks[0]) | set(tasks[1]) == set(TASKS) and not set(tasks[0]) & set(tasks[1])
