"""The sweep file's `scheduler:` block and `metrics:`: W&B's own Optuna translation, the user's study factory
and define-by-run space loaded from `source` as W&B loads them, multi-objective studies and their Pareto
front, and every bad input as one line with exit code 2.

Claims of docs/sweeps.md covered here:
- "parameter distributions and directions are W&B's own (wandb.sdk.sweeps.scheduler.optuna)":
  test_every_distribution_w_b_documents_is_w_b_s_own, test_untranslatable_distributions_are_one_line,
  test_directions_are_w_b_s
- "W&B's scheduler builds the same search space from the same file": test_lr_search_optuna_is_the_same_study_both_ways
- "engine optuna with `optimizer` (sampler, pruner, terminator)": test_optimizer_factory_samples_prunes_and_stops
- "define-by-run `search_space`": test_define_by_run_search_space_sweep
- "metrics: a multi-objective study, Pareto front in the sweep table and in compare": test_two_objective_sweep
- "bad scheduler input is one line, exit 2": test_bad_scheduler_input_is_one_line_exit_2
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from wandb.sdk.sweeps.scheduler import optuna as wandb_optuna
from wandb.sdk.sweeps.sweep_info import SweepInfo

from pe_core.errors import ConfigError
from pe_sweeps.cli import cli_main
from pe_sweeps.compare.pareto import non_dominated
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.search import build_search

ROOT = Path(__file__).resolve().parents[2]
FAKE = str(ROOT / "tests" / "fake_trial.py")

# every distribution W&B's sweep-config reference documents, with one spec each (two where W&B's Optuna
# translation branches: q_uniform int/float, q_log_uniform_values int/float)
TRANSLATED = {
    "constant": {"value": 3},
    "categorical": {"values": ["a", "b"]},
    "categorical_explicit": {"distribution": "categorical", "values": [1, 2, 4]},
    "int_uniform": {"distribution": "int_uniform", "min": 1, "max": 9},
    "inferred_int_uniform": {"min": 1, "max": 4},
    "inferred_uniform": {"min": 0.1, "max": 0.5},
    "uniform": {"distribution": "uniform", "min": 0.0, "max": 1.0},
    "q_uniform_int": {"distribution": "q_uniform", "min": 0, "max": 12, "q": 3},
    "q_uniform_float": {"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.25},
    "log_uniform_values": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2},
    "q_log_uniform_values_int": {"distribution": "q_log_uniform_values", "min": 1, "max": 64},
    "q_log_uniform_values_float": {"distribution": "q_log_uniform_values", "min": 8, "max": 256, "q": 8},
}
UNTRANSLATED = {  # W&B's Optuna translation has no equivalent for these
    "log_uniform": {"distribution": "log_uniform", "min": -4, "max": 0},
    "inv_log_uniform": {"distribution": "inv_log_uniform", "min": -4, "max": 0},
    "inv_log_uniform_values": {"distribution": "inv_log_uniform_values", "min": 1e-4, "max": 1.0},
    "normal": {"distribution": "normal", "mu": 0, "sigma": 1},
    "q_normal": {"distribution": "q_normal", "mu": 0, "sigma": 1, "q": 1},
    "log_normal": {"distribution": "log_normal", "mu": 0, "sigma": 1},
    "q_log_normal": {"distribution": "q_log_normal", "mu": 0, "sigma": 1, "q": 1},
    "beta": {"distribution": "beta", "a": 2, "b": 2},
    "q_beta": {"distribution": "q_beta", "a": 2, "b": 2, "q": 0.1},
}


def sweep_dict(parameters=None, engine="optuna", **extra) -> dict:
    method = "custom" if engine == "optuna" else "bayes"  # as W&B's sweep schema has it
    sweep = {"program": FAKE, "method": method, "metric": {"name": "val/score", "goal": "maximize"},
             "parameters": parameters or {"x": {"min": 0.0, "max": 1.0}},
             "command": ["${env}", "${interpreter}", "${program}", "--mode=quadratic", "${args}"]}  # fmt: skip
    if engine:
        sweep["scheduler"] = {"engine": engine}
    for key, value in extra.items():
        if value is None:
            sweep.pop(key, None)
        elif key == "scheduler":
            sweep["scheduler"].update(value)
        else:
            sweep[key] = value
    return sweep


def write(tmp_path, sweep: dict, name="s") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def source(tmp_path, text: str) -> str:
    path = tmp_path / "study_source.py"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", TRANSLATED)
@pytest.mark.parametrize("engine", ["optuna", "wandb"])
def test_every_distribution_w_b_documents_is_w_b_s_own(tmp_path, name, engine):
    """Each parameter is drawn from exactly the distribution W&B's Optuna scheduler builds; with engine
    wandb a constant is passed through and a q that Optuna cannot step on a log scale is rounded to."""
    spec = TRANSLATED[name]
    sweep = sf.load_sweep(write(tmp_path, sweep_dict({"x": spec}, engine)))
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)).ask()
    value = build_search(sweep).draw(trial)["x"]
    expected = wandb_optuna.sweep_parameter_to_distribution(spec)
    if engine == "wandb" and name == "constant":
        assert value == 3 and "x" not in trial.distributions
        return
    assert trial.distributions["x"] == expected
    assert expected._contains(expected.to_internal_repr(trial.params["x"]))
    if engine == "wandb" and name == "q_log_uniform_values_float":
        assert value % 8 == 0 and trial.user_attrs["quantized/x"] == value  # W&B's server quantizes to q


@pytest.mark.parametrize("name", UNTRANSLATED)
def test_untranslatable_distributions_are_one_line(tmp_path, name):
    with pytest.raises(ConfigError) as error:
        sf.load_sweep(write(tmp_path, sweep_dict({"x": UNTRANSLATED[name]})))
    assert "\n" not in str(error.value) and "'x'" in str(error.value)
    if name in ("log_uniform", "inv_log_uniform"):  # refused by W&B's sweep schema, for every engine
        assert "refused by W&B's sweep schema; use" in str(error.value)
        with pytest.raises(ConfigError, match="refused by W&B's sweep schema"):
            sf.load_sweep(write(tmp_path, sweep_dict({"x": UNTRANSLATED[name]}, None)))


def test_directions_are_w_b_s(tmp_path):
    metrics = [{"name": "val/score", "goal": "maximize"}, {"name": "val/cost"}]
    sweep = sf.load_sweep(write(tmp_path, sweep_dict(metrics=metrics, metric=None)))
    search = build_search(sweep)
    assert search.directions == wandb_optuna.sweep_directions(sweep) == ["maximize", "minimize"]
    assert search.metrics == ["val/score", "val/cost"] and search.multi_objective


def test_lr_search_optuna_is_the_same_study_both_ways(monkeypatch):
    """W&B's own scheduler (build_optuna_optimizer, as `wandb sweep-scheduler` calls it) and our runner
    build the same search space, sampler and pruner from sweeps/lr_search_optuna.yaml."""
    monkeypatch.chdir(ROOT)  # `source` is relative to the directory the scheduler runs in, for W&B too
    sweep = sf.load_sweep("sweeps/lr_search_optuna.yaml")
    info = SweepInfo(id="x", name="x", entity="e", project="p", config=sweep, controller_run_name="")
    theirs = wandb_optuna.build_optuna_optimizer(info)
    ours = build_search(sweep)
    trial = optuna.create_study().ask()
    ours.draw(trial)
    assert trial.distributions == theirs.distributions
    assert type(ours.pruner) is type(theirs.study.pruner) is optuna.pruners.MedianPruner
    assert type(ours.make_sampler(0)) is type(theirs.study.sampler) is optuna.samplers.TPESampler
    assert ours.directions == [d.name.lower() for d in theirs.study.directions] == ["maximize"]


FACTORY_OK = "import optuna\ndef make(sweep):\n    return optuna.create_study(direction='maximize')\n"


@pytest.mark.parametrize(
    "change, source_text, message",
    [
        ({"scheduler": {"optimizer": "make"}}, None, "scheduler.optimizer needs scheduler.source, the python file"),
        ({"scheduler": {"optimizer": "make", "source": "missing.py"}}, None, "'missing.py' not found"),
        ({"scheduler": {"optimizer": "make"}}, "def make(sweep)\n", "SyntaxError"),
        ({"scheduler": {"optimizer": "make"}}, "import no_such_module_here\n", "ModuleNotFoundError"),
        ({"scheduler": {"optimizer": "nothing"}}, FACTORY_OK, "has no attribute 'nothing'"),
        ({"scheduler": {"search_space": "nothing"}}, FACTORY_OK, "has no attribute 'nothing'"),
        ({"scheduler": {"optimizer": "make"}}, "def make(sweep):\n    return {}\n", "returned dict instead of optuna"),
        ({"scheduler": {"optimizer": "make"}}, FACTORY_OK.replace("maximize", "minimize"), "does not match"),
        ({"metrics": [{"name": "val/score"}]}, None, "either metric (one objective) or metrics"),
        ({"scheduler": {"engine": "ax"}}, None, "scheduler.engine 'ax' is not supported by cli.py sweep; choose"),
        ({"scheduler": {"engine": "nevergrad"}}, None, "choose one of: wandb, optuna"),
        ({"scheduler": {"engine": "wandb", "optimizer": "make"}}, None, "read by engine optuna only"),
        ({"early_terminate": {"type": "hyperband", "min_iter": 1}}, None, "early_terminate is not read"),
        ({"method": "grid", "parameters": {"x": {"values": [1]}}}, None, "engine optuna takes method custom"),
        ({"method": "bayes"}, None, "engine optuna takes method custom (W&B's sweep schema"),
        ({"method": "custom", "scheduler": None}, None, "method custom needs scheduler: {engine: optuna}"),
        ({"metrics": [{"name": "a", "goal": "maximize"}], "metric": None}, None, "metrics must list two or more"),
        (
            {"metrics": [{"name": "a", "goal": "maximize"}, {"name": "b"}], "metric": None,
             "scheduler": {"optimizer": "make"}},
            "import optuna\ndef make(sweep):\n    return optuna.create_study(directions=['maximize', 'minimize'])\n",
            "a multi-objective study cannot be pruned",
        ),
    ],
)  # fmt: skip
def test_bad_scheduler_input_is_one_line_exit_2(tmp_path, capsys, change, source_text, message):
    sweep = sweep_dict(**change)
    if source_text is not None:
        sweep["scheduler"]["source"] = source(tmp_path, source_text)
    with pytest.raises(SystemExit) as exit_:
        cli_main(["sweep", str(write(tmp_path, sweep)), f"--out_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out" / "sweeps" / "s" / "trial-0").exists()  # refused before any trial


def test_metrics_need_the_optuna_engine(tmp_path):
    with pytest.raises(ConfigError, match="metrics \\(several objectives\\) needs scheduler: \\{engine: optuna\\}"):
        sf.load_sweep(write(tmp_path, sweep_dict(None, None, metrics=[{"name": "a"}], metric=None)))


def test_non_dominated_is_optunas_pareto_front():
    points = {"a": [1.0, 5.0], "b": [2.0, 6.0], "c": [2.0, 4.0], "d": [0.5, 0.5]}
    assert non_dominated(points, ["maximize", "maximize"]) == ["b"]
    assert non_dominated(points, ["maximize", "minimize"]) == ["c", "d"]


# --- end to end through `cli.py sweep`, on the fake trial program ----------------------------------------


def run_sweep(path: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    argv = [sys.executable, str(ROOT / "cli.py"), "sweep", str(path), f"--out_dir={out}"]
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def study(out: Path, name="s") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{out / 'sweeps' / name / 'optuna.db'}")


@pytest.mark.slow
def test_optimizer_factory_samples_prunes_and_stops(tmp_path):
    """The factory's seeded TPE samples, its median pruner cuts the trials worse than trial 0, and its
    terminator ends the sweep before run_cap."""
    factory = source(
        tmp_path,
        """import optuna
def make(sweep):
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=7),
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0))
    return study, lambda s: len(s.trials) >= 3
""",
    )
    command = ["${env}", "${interpreter}", "${program}", "--mode=first_wins", "--steps=5", "--pause=0.5", "${args}"]
    sweep = sweep_dict(run_cap=6, command=command, scheduler={"optimizer": "make", "source": factory})
    run_sweep(write(tmp_path, sweep), tmp_path)
    trials = study(tmp_path).trials
    assert len(trials) == 3  # the terminator, not run_cap (6)
    assert trials[0].state == TrialState.COMPLETE and trials[0].value == 1.0
    assert [t.state for t in trials[1:]] == [TrialState.PRUNED] * 2
    first = optuna.samplers.TPESampler(seed=7)  # TPE's first (random start-up) point, same seed
    expected = optuna.create_study(sampler=first).ask({"x": sf.wandb_distribution("x", {"min": 0.0, "max": 1.0})})
    assert trials[0].params["x"] == expected.params["x"]


@pytest.mark.slow
def test_define_by_run_search_space_sweep(tmp_path):
    """A conditional space from `search_space`: the branch picks the range of x, the child gets both."""
    space = source(
        tmp_path,
        """def space(trial):
    branch = trial.suggest_categorical("branch", ["low", "high"])
    x = trial.suggest_float("x", 0.0, 0.5) if branch == "low" else trial.suggest_float("x", 0.5, 1.0)
    return {"branch": branch, "x": x}
""",
    )
    sweep = sweep_dict(run_cap=4, scheduler={"search_space": "space", "source": space})
    del sweep["parameters"]  # the source defines them
    run_sweep(write(tmp_path, sweep), tmp_path)
    trials = study(tmp_path).trials
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials)
    for t in trials:
        low = t.params["branch"] == "low"
        assert (t.params["x"] <= 0.5) if low else (t.params["x"] >= 0.5)
        assert math.isclose(t.value, -((t.params["x"] - 0.3) ** 2))  # the child got this trial's x
        assert f"--branch={t.params['branch']}" in t.user_attrs["command"]


@pytest.mark.slow
def test_two_objective_sweep(tmp_path, capsys):
    """`metrics:` -> a two-direction study told both values; the sweep table marks Optuna's Pareto front
    and `cli.py compare` prints it beside a table per metric."""
    metrics = [{"name": "val/score", "goal": "maximize"}, {"name": "val/cost", "goal": "minimize"}]
    command = ["${env}", "${interpreter}", "${program}", "--mode=pareto", "${args}"]
    sweep = sweep_dict(None, metric=None, metrics=metrics, run_cap=5, command=command)
    result = run_sweep(write(tmp_path, sweep), tmp_path)
    s = study(tmp_path)
    assert [d.name for d in s.directions] == ["MAXIMIZE", "MINIMIZE"]
    trials = s.trials
    assert len(trials) == 5 and all(t.state == TrialState.COMPLETE for t in trials)
    for t in trials:
        assert t.values == pytest.approx([-((t.params["x"] - 0.3) ** 2), t.params["x"]])
    front = {t.number for t in s.best_trials}
    expected = non_dominated({t.number: t.values for t in trials}, ["maximize", "minimize"])
    assert front == set(expected) and front  # Optuna's rule on the stored study = on the values alone
    assert "val/score, val/cost  (* = Pareto front)" in result.stdout
    assert "Pareto front (non-dominated configurations)" in result.stdout  # end-of-sweep comparison

    capsys.readouterr()
    cli_main(["compare", f"--out_dir={tmp_path}", "--sweep=s", "--rows=x"])
    shown = capsys.readouterr().out
    assert "val/score" in shown and "val/cost" in shown and "Pareto front" in shown


ONE_ENCODING = """import json, os, sys
from pathlib import Path
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
x = float(args["x"])
run = Path(os.environ["PE_OUT_DIR"]) / "runs" / f"p-{os.getpid()}"
run.mkdir(parents=True)
final = {"val/score": -x * x, "val/cost": x}
record = {"encoding": "rope", "status": "finished", "final": final, "history": [{"step": 1, **final}],
          "config": args, "sweep": os.environ.get("PE_SWEEP")}
(run / "record.json").write_text(json.dumps(record))
"""


@pytest.mark.slow
@pytest.mark.parametrize("objectives", ["metric", "metrics"])
def test_a_comparison_with_no_cell_never_fails_the_sweep(tmp_path, objectives):
    """Issue 42.6: a W&B-dialect sweep (engine optuna, method custom) and a two-objective `metrics:` sweep of a
    program whose records name one encoding and no task ran every trial, then exited 1 on the comparison
    (`max() arg is an empty sequence`: every run excluded, no cell). Now they exit 0, the comparison naming
    why each run was left out."""
    program = tmp_path / "one_encoding.py"
    program.write_text(ONE_ENCODING)
    command = ["${env}", "${interpreter}", "${program}", "${args}"]
    both = {
        "metric": None,
        "metrics": [{"name": "val/score", "goal": "maximize"}, {"name": "val/cost", "goal": "minimize"}],
    }
    sweep = sweep_dict(
        None, program=str(program), run_cap=4, command=command, **(both if objectives == "metrics" else {})
    )
    result = run_sweep(write(tmp_path, sweep), tmp_path)
    assert "Traceback" not in result.stderr and "warning: the comparison" not in result.stderr, result.stderr[-3000:]
    assert [t.state for t in study(tmp_path).trials] == [TrialState.COMPLETE] * 4
    assert "excluded 4 run(s)" in result.stdout and "no task" in result.stdout, result.stdout[-3000:]
