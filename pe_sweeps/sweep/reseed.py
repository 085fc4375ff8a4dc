"""`cli.py sweep FILE --reseed N --per KEY[,KEY]`: tune each group on its own, then re-run its best
configuration with fresh seeds (the protocol of Kazemnejad et al. 2023: tune every encoding with the
same budget, then compare over seeds).

Stage 1 runs FILE's search once per value of the `--per` keys (one study `<study>-<value>` each, the
same study `--set KEY=value` makes, each with the file's full budget). Each group's best configuration
is the setting of the searched parameters with the best mean of the file's metric (its validation
metric) over the seeds it ran with, chosen separately for each task when the file varies `data.task`
(a task is compared, not tuned). Stage 2 is one grid study `<study>-reseed`: every group's best
configuration x N seeds that stage 1 did not use. The choice table says how many seeds each choice's value rests
on (one seed: one draw, the best of its group's trials), and after stage 2 each choice's stage-1 value stands beside
its stage-2 mean on the fresh seeds, so a choice made on a lucky draw shows its drop (the winner's curse). Both
stages are ordinary sweep studies, so resume, kill -9 recovery and --workers behave as for a plain sweep;
re-running the command starts nothing that has finished.

A fresh seed is fresh data too: stage 2 leaves the data seed to the run (the configs' `data.seed: null`
follows `seed_everything`), so its seeds differ in training examples, their order and the generated
evaluation sets, not only in the initialisation, and the seed spread includes the evaluation's own
sampling error. `--no-reseed-data` fixes stage 2's data seed at stage 1's instead (`stage1_data_seed`).
"""

import copy
import dataclasses
import itertools
from pathlib import Path

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.table import Table

from pe_core.errors import ConfigError
from pe_sweeps.runs.console import app_console
from pe_sweeps.runs.manifest import set_compare_rows
from pe_sweeps.runs.records import check_name
from pe_sweeps.runs.run_naming import short_value
from pe_sweeps.storages.storage_url import storage_url
from pe_sweeps.sweep import sweep_file as sf
from pe_sweeps.sweep.display import LiveStatus, short_params, trial_table
from pe_sweeps.sweep.run import SweepOptions, check_options
from pe_sweeps.sweep.study_protocol import apply_overrides, base_name
from pe_sweeps.sweep.supervision import Sweep
from pe_sweeps.sweep.trial_child import latest_record

SEED = "seed_everything"
DATA_SEED_KEYS = sf.SEED_PARAMETERS[1:]  # data.seed, data.init_args.seed
TASK_KEYS = ("data.task", "data.init_args.task")  # compared side by side, never tuned across


@dataclasses.dataclass
class Choice:
    """The best configuration of one group (and task), and the evidence it was chosen on."""

    group: dict
    task: dict
    params: dict
    value: float
    seeds: int
    trials: int


def check_protocol(sweep: dict, opts: SweepOptions) -> list[str]:
    """The --per keys, after checking the options (before anything is written)."""
    if not opts.per:
        raise ConfigError("--reseed needs --per KEY[,KEY] (the parameters tuned separately, e.g. model.arch.encoding)")
    if opts.reseed < 1:
        raise ConfigError(f"--per needs --reseed N with N >= 1 fresh seeds per configuration, got {opts.reseed}")
    check_options(opts, sweep)  # and resolves --devices_per_trial and --workers auto
    if len(sf.metric_names(sweep)) > 1:
        raise ConfigError(f"--reseed chooses each group's best setting on one metric; {opts.file} has metrics: "
                          f"{', '.join(sf.metric_names(sweep))} (give one metric:)")  # fmt: skip
    if "search_space" in (sweep.get("scheduler") or {}):
        raise ConfigError("--per fixes the file's parameters; with scheduler.search_space the source file defines them")
    keys = [k.strip() for k in opts.per.split(",") if k.strip()]
    choices = [k for k, s in sweep["parameters"].items() if "values" in s and k != SEED]
    for key in keys:
        if key not in choices:
            raise ConfigError(f"--per {key!r} is not a parameter with `values` in {opts.file}; choose from: "
                              f"{', '.join(choices) or 'none'}")  # fmt: skip
    return keys


def group_sweeps(sweep: dict, keys: list[str]) -> list[tuple[dict, dict]]:
    """(group values, the file's sweep with those values fixed) for every combination, in file order."""
    out = []
    for combo in itertools.product(*(sweep["parameters"][k]["values"] for k in keys)):
        group = dict(zip(keys, combo))
        fixed = copy.deepcopy(sweep)
        fixed["parameters"].update({k: {"value": v} for k, v in group.items()})
        out.append((group, fixed))
    return out


def group_study_name(base: str, group: dict) -> str:
    """`<study>-<value>[-<value>]`, each value as a run name shows it, so a dict-valued --per key such as
    `model.arch.encoding_options: "{randomize_positions: 256}"` still names one folder."""
    return "-".join([base, *map(short_value, group.values())])


def run_study(sweep: dict, opts: SweepOptions, name: str, console: Console) -> optuna.Study:
    runner = Sweep(sweep, dataclasses.replace(opts, study_name=name))
    with LiveStatus.for_runner(console, runner) as live:
        runner.run(on_tick=live.tick)
        runner.show(live.final)
    return runner.study


def best_configs(study: optuna.Study, sweep: dict, group: dict) -> list[Choice]:
    """Per task, the searched setting (seed aside) with the best mean metric over its complete trials."""
    by_setting: dict[tuple, list[float]] = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        task = tuple((k, v) for k, v in trial.params.items() if k in TASK_KEYS)
        params = tuple((k, v) for k, v in trial.params.items() if k not in TASK_KEYS and k != SEED)
        by_setting.setdefault((task, params), []).append(trial.value)
    maximize = sf.directions(sweep) == ["maximize"]
    best: dict[tuple, Choice] = {}
    for (task, params), values in sorted(by_setting.items(), key=repr):  # ties: the first in a fixed order
        mean = sum(values) / len(values)
        current = best.get(task)
        if current is None or (mean > current.value if maximize else mean < current.value):
            best[task] = Choice(group, dict(task), dict(params), mean, len(values), 0)
    for choice in best.values():
        choice.trials = sum(len(v) for (t, _), v in by_setting.items() if dict(t) == choice.task)
    return [best[t] for t in sorted(best, key=repr)]


def used_seeds(sweep: dict, studies: list[optuna.Study]) -> set:
    """Seeds stage 1 trained with: the file's seed values and each trial's run record."""
    spec = sweep["parameters"].get(SEED, {})
    seeds = set(spec.get("values", [])) | ({spec["value"]} if "value" in spec else set())
    for study in studies:
        for trial in study.get_trials(deepcopy=False):
            record = latest_record(Path(trial.user_attrs["trial_dir"])) if "trial_dir" in trial.user_attrs else None
            if record and record.seed is not None:
                seeds.add(record.seed)
    return seeds


def fresh_seeds(used: set, n: int) -> list[int]:
    return list(itertools.islice((s for s in itertools.count() if s not in used), n))


def stage1_data_seed(sweep: dict) -> int:
    """The data seed stage 1 trained on: the file's fixed data seed, else its seed (`seed_everything`'s
    value, or the first of its values), which a null `data.seed` follows, else 0."""
    parameters = sweep["parameters"]
    for key in DATA_SEED_KEYS:
        if "value" in parameters.get(key, {}):
            return parameters[key]["value"]
    spec = parameters.get(SEED, {})
    return spec["value"] if "value" in spec else (spec.get("values") or [0])[0]


def reseed_sweep(sweep: dict, choices: list[Choice], seeds: list[int], reseed_data: bool = True) -> dict:
    """A grid study over exactly the chosen configurations x the fresh seeds (no pruning, no cap), run by
    our own grid queue whatever `scheduler:` stage 1 used (W&B's Optuna engine has no grid). With
    `reseed_data` a data seed the file fixes is dropped (each run's follows its seed), else the data seed
    is fixed at stage 1's."""
    points = [{**c.group, **c.task, **c.params, SEED: s} for c in choices for s in seeds]
    parameters = {
        k: s for k, s in sweep["parameters"].items() if "value" in s and k not in points[0] and k not in DATA_SEED_KEYS
    }
    if not reseed_data:
        parameters["data.seed"] = {"value": stage1_data_seed(sweep)}
    for key in points[0]:
        values = list(dict.fromkeys(p[key] for p in points))
        parameters[key] = {"values": values}
    out = {
        k: v for k, v in sweep.items() if k not in ("early_terminate", "run_cap", "method", "parameters", "scheduler")
    }
    return {**out, "method": "grid", "parameters": parameters, "points": points}


def choice_table(choices: list[Choice], metric: str) -> Table:
    """Each group's choice, the value it was chosen on, the seeds that value rests on and the trials it beat."""
    table = Table(title=f"stage 1: best configuration per group (mean validation {metric} over its seeds)",
                  caption=choice_caption(choices), caption_justify="left")  # fmt: skip
    for column in ("group", "task", "chosen"):
        table.add_column(column, overflow="fold")
    for column in (metric, "seeds", "trials"):  # numbers never split
        table.add_column(column, justify="right", no_wrap=True)
    for c in choices:
        table.add_row(
            short_params(c.group), short_params(c.task) or "-", short_params(c.params) or "-", f"{c.value:.4f}",
            str(c.seeds), str(c.trials),
        )  # fmt: skip
    return table


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def choice_caption(choices: list[Choice]) -> str:
    """Under the choice table: what a value resting on one seed means (the winner's curse)."""
    single = [c for c in choices if c.seeds == 1]
    lines = ["seeds: the runs each choice's value rests on; trials: the runs it was chosen among"]
    lines += [f"{short_params({**c.group, **c.task})}: 1 seed: one draw, the best of {plural(c.trials, 'trial')}; "
              "expect less on fresh seeds (winner's curse: stage 2 shows it)" for c in single]  # fmt: skip
    return "\n".join(lines)


def stage_rows(choices: list[Choice], study: optuna.Study) -> list[dict]:
    """Per chosen configuration: its stage-1 value and seeds, its stage-2 mean over the fresh seeds (the complete
    trials of `study`, the reseed study, with its parameters) and the change from stage 1 to stage 2."""
    rows = []
    for c in choices:
        point = {**c.group, **c.task, **c.params}
        values = [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                  if all(k in t.params and t.params[k] == v for k, v in point.items())]  # fmt: skip
        stage2 = sum(values) / len(values) if values else None
        rows.append({"choice": c, "stage1": c.value, "stage1_seeds": c.seeds, "stage2": stage2,
                     "stage2_seeds": len(values), "change": None if stage2 is None else stage2 - c.value})  # fmt: skip
    return rows


def stage_table(choices: list[Choice], study: optuna.Study, metric: str) -> Table:
    """Each chosen configuration's stage-1 value (on the seeds it was chosen on) beside its stage-2 mean on fresh
    seeds: a choice made on one lucky draw shows its drop here (the winner's curse)."""
    table = Table(title=f"stage 1 beside stage 2: mean validation {metric} of each chosen configuration",
                  caption="stage 1: the value it was chosen on (its seeds); stage 2: the mean over fresh seeds, "
                  "which the comparison below uses; change: stage 2 - stage 1", caption_justify="left")  # fmt: skip
    for column in ("group", "task", "chosen"):
        table.add_column(column, overflow="fold")
    for column in ("stage 1", "stage 2", "change"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in stage_rows(choices, study):
        c = row["choice"]
        stage2 = "-" if row["stage2"] is None else f"{row['stage2']:.4f} ({plural(row['stage2_seeds'], 'seed')})"
        change = "-" if row["change"] is None else f"{row['change']:+.4f}"
        table.add_row(short_params(c.group), short_params(c.task) or "-", short_params(c.params) or "-",
                      f"{c.value:.4f} ({plural(c.seeds, 'seed')})", stage2, change)  # fmt: skip
    return table


def comparison_rows(keys: list[str]) -> str:
    """Rows of the final comparison: the --per keys, an encoding shown as the run's `encoding` field."""
    from lightning_modules.registry import encoding_parameters

    encodings = encoding_parameters()  # shown together as the run's `encoding`
    rows = ["encoding" if k in encodings else k for k in keys if k not in TASK_KEYS]
    return ",".join(rows or ["encoding"])


def run_reseed(opts: SweepOptions) -> optuna.Study:
    """Stage 1 per group, the choice table, stage 2, its trial table and the comparison."""
    from pe_sweeps.compare.command import print_comparison

    overrides = opts.set.split(",") if opts.set else []
    sweep, suffix = apply_overrides(sf.load_sweep(opts.file), overrides)
    keys = check_protocol(sweep, opts)
    base = opts.study_name or "-".join(filter(None, [base_name(opts, sweep), suffix]))
    check_name("study name (--study_name, the sweep file's `name:` or its file name)", base_name(opts, sweep))
    if opts.storage is None:  # every study of the protocol in the file's one database (one dashboard)
        opts.storage = storage_url(opts, base_name(opts, sweep))
    metric = sf.metric_names(sweep)[0]
    console = app_console()  # in a file or pipe: a line per trial, nothing wrapped or cut
    studies, choices = [], []
    for group, group_sweep in group_sweeps(sweep, keys):
        name = group_study_name(base, group)
        console.print(f"stage 1, {short_params(group)}: study {name}")
        study = run_study(group_sweep, opts, name, console)
        studies.append(study)
        found = best_configs(study, sweep, group)
        if not found:
            console.print(f"  no complete trial in {name}: group left out of the reseed stage")
        choices += found
    if not choices:
        raise ConfigError(f"stage 1 of {base} has no complete trial in any group; see the trial tables with "
                          f"`optuna-dashboard` or re-run the command to retry")  # fmt: skip
    console.print(choice_table(choices, metric))
    seeds = fresh_seeds(used_seeds(sweep, studies), opts.reseed)
    data = "the same seeds" if opts.reseed_data else f"data seed {stage1_data_seed(sweep)} (--no-reseed-data)"
    console.print(f"stage 2: {len(choices)} configuration(s) x seeds {seeds}, data: {data}: study {base}-reseed")
    study = run_study(reseed_sweep(sweep, choices, seeds, opts.reseed_data), opts, f"{base}-reseed", console)
    study.set_user_attr("compare_rows", comparison_rows(keys))  # `cli.py compare --sweep <study>-reseed` rows
    set_compare_rows(opts.out_dir, study.study_name, comparison_rows(keys))  # and in its manifest
    console.print(trial_table(study, metric))
    console.print(stage_table(choices, study, metric))
    print_comparison(opts.out_dir, study.study_name, metric, console=console, rows=comparison_rows(keys))
    return study
