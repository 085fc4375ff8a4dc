"""`cli.py compare`: runs side by side, rows x columns (encoding x task), mean +- std over seeds.

Each cell: mean (or median, `--aggregate median`), sample std (ddof=1), n and a 95% interval of that
aggregate over seeds: Student's t for the mean (exact coverage for normal values at any n >= 2), the
order-statistic interval for the median (95% from n = 6; below, [min, max] with its exact level), clipped
to the metric's range (lightning_modules.metrics.bounds) with a clipped end marked; printed to two
significant digits of the interval's width. Per column a rank (1 = best by the metric's goal, the best
cell marked); per row, over the columns, the mean rank, the mean reciprocal rank (the headline of
Kazemnejad et al. 2023) and rliable's IQM over columns x seeds with its stratified-bootstrap interval
(Agarwal et al. 2021), only for the rows with every column and only when every column holds one kind of
run, its interval's real coverage at the table's shape simulated and printed. Every pair of rows in a column gets
a verdict under a declared protocol (statistics.py `judge`): Welch t-tests over seeds (on log values for
perplexity), Holm-adjusted over one family (every pair x column x metric shown, its size printed; with
`--primary METRIC` that metric's pairs, the others exploratory): better / worse at alpha 0.05, equivalent within
a margin declared beforehand (the sweep file's `compare: {margin: M}` or `--margin`) by two one-sided tests, else
inconclusive; under the table the best row against the runner-up, in --format json every pair. `--value best`
or `--best-over` on a beyond-training-length metric (`val/acc_ood`, a length past training) is refused unless
`--allow_ood_selection`, and then labelled. `--best-over KEY`
applies TUPE's fine-tuning rule (Ke et al. 2021: median over seeds per learning rate, then the best
learning rate): per cell only the value of KEY with the best aggregate is kept, and named. `--metric a,b`
shows several metrics side by side (a `--best-over` choice is made on the first and kept for the others).

A result is defined by SETUP (data, model, optimisation, steps, precision, world size), declared once
below; everything else in a config is ignored. Runs that did not finish, lack the metric, repeat a seed,
or whose setup differs from the rest of their cell are left out and listed with the reason, never
averaged in; a column whose rows differ in setup (beyond the row, column and --best-over keys and the
parameters the sweep tunes) is refused with one line naming the keys. Reads the local run records
(runs/records.py) or, with --wandb ENTITY/PROJECT, the same runs from the W&B API; `--save_runs FILE`
keeps the runs it considered and the sweep's spec in one small JSON file, which `--from FILE` reads back
instead (compare/saved_runs.py): how docs/results/ recomputes the tables of docs/RESULTS.md.

This module parses the options and runs the steps: which runs (selection.py), the sweep's metrics
and parameters (spec.py: its manifest, else its Optuna database), the statistics
(statistics.py), the five formats (render.py) and the report (report.py).

To run:
    python cli.py compare                                   # every run under out/, val/acc
    python cli.py compare --sweep length_generalization     # that sweep's runs and metric
    python cli.py compare --rows encoding,model.init_args.lr --format markdown
    python cli.py compare --metric val/acc,val/acc_ood --format latex --latex_interval
    python cli.py compare --aggregate median --best-over model.init_args.lr   # TUPE's rule
    python cli.py compare --report out/report               # plots of every metric + one HTML page
    python cli.py compare --per_seed                        # every cell's per-seed values under the table
    python cli.py compare --explain                         # the full methodology under the table
    python cli.py compare --wandb my-entity/pe-sweeps
    python cli.py compare --sweep repro_alibi --save_runs docs/results/alibi.json   # keep the runs
    python cli.py compare --from docs/results/alibi.json --format markdown         # recompute the table
"""

import math
import re
import shlex
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from rich.console import Console

from pe_core.errors import ConfigError
from pe_sweeps.compare.comparison import Comparison, lookup
from pe_sweeps.compare.preconditions import Precondition, parse_preconditions
from pe_sweeps.compare.render import FORMATS, output, print_front, render_table
from pe_sweeps.compare.saved_runs import read_saved_runs, save_runs
from pe_sweeps.compare.selection import read_records, select, side_by_side
from pe_sweeps.compare.spec import default_rows, objectives, sweep_spec, tuned_keys
from pe_sweeps.compare.statistics import AGGREGATES, INTERVALS, VALUES, compare_metrics
from pe_sweeps.runs.records import RunRecord
from pe_sweeps.runs.wandb_records import read_wandb

__all__ = ["CompareOptions", "compare_main", "print_comparison", "read_records", "run_compare"]


@dataclass
class CompareOptions:
    """Options of `cli.py compare`."""

    CHOICES: ClassVar[dict] = {"value": VALUES, "aggregate": AGGREGATES, "format": FORMATS, "interval": INTERVALS}

    out_dir: str = "out"  # records are read recursively from here (runs/ and sweeps/)
    sweep: str | None = None  # keep runs of this sweep / study only (a,b: of several); its metric becomes the default
    metric: str | None = None  # M[,M...]; default: the sweep's metric(s) with --sweep, else val/acc, each with
    # its in-distribution / beyond-length companion (val/acc_ood) as the sweep's ending shows; several
    # metrics: side by side, then their Pareto front (non-dominated rows)
    value: str = "final"  # "final" (last validation), "best" (best validation, by the metric's goal) or
    # "step=N" (the validation at global step N: a learning curve's point)
    aggregate: str = "mean"  # over seeds: mean or median (TUPE's rule)
    best_over: str | None = None  # KEY (e.g. model.init_args.lr): per cell keep the KEY value aggregating best
    rows: str | None = None  # comma-separated record fields or dotted config paths; default: encoding, and
    # with --sweep also the parameters that the sweep varies (other than seed, encoding and task)
    cols: str = "task"  # comma-separated record fields or dotted config paths, one column per value
    format: str = "table"  # table (rich, to the console), csv, json, markdown, latex (to stdout)
    per_seed: bool = False  # table, markdown, latex: list every cell's per-seed values under it (csv, json: always)
    explain: bool = False  # table, markdown: the full methodology under the table in place of its short legend (the
    # interval's method, every column's tests, the IQM's bootstrap, the protocol); latex: on stderr
    latex_interval: bool = False  # --format latex: each cell's interval after its aggregate
    latex_rank: bool = False  # --format latex: a rank column beside each column
    report: str | None = None  # write the plots (PNG, SVG, PDF) of every metric and index.html to this folder
    wandb: str | None = None  # ENTITY/PROJECT: read runs from the W&B API instead of --out_dir
    save_runs: str | None = None  # write the runs compared (the left-out ones too) and the sweep's spec to this JSON
    from_runs: str | None = None  # (or --from) FILE of --save_runs: read runs and the sweep's spec from it instead
    # of --out_dir and the sweep's study
    margin: str | None = None  # M (every metric) or METRIC=M[,METRIC=M]: equivalence margin of the pair verdicts
    # (TOST; on the log scale for perplexity); default: the sweep file's `compare: {margin: ...}`, else none
    primary: str | None = None  # METRIC: the family of tests is this metric's pairs; the other metrics are exploratory
    precondition: str | None = None  # METRIC OP NUMBER (e.g. "val/acc >= 0.9"), COL:METRIC OP NUMBER or baseline,
    # comma-separated: a cell failing it is marked, unranked, untested and out of the aggregates; default: the sweep
    # file's `compare: {precondition: ...}`, else none (compare/preconditions.py)
    interval: str = "seeds+examples"  # each cell's interval and each pair's test: over seeds and the evaluation's
    # examples (from the runs' per-example outcomes, where every run of the cell kept them), or "seeds" only
    allow_ood_selection: bool = False  # allow --value best / --best-over on a beyond-training-length metric (labelled)


def shown_metrics(metrics: list[tuple[str, str]], records, value: str = "final") -> tuple[list[str], list]:
    """The metrics a comparison shows and their goals (None: by the name): for one objective on the
    synthetic tasks, in-distribution and beyond-length accuracy side by side (`side_by_side`), else the
    objectives. `cli.py compare` without --metric and the end of `cli.py sweep` show the same."""
    declared = dict(metrics)
    shown = side_by_side(metrics[0][0], records, value) if len(metrics) == 1 else list(declared)
    return shown, [declared.get(m) for m in shown]  # the companion (e.g. val/acc_ood) goes by its name


def run_compare(opts: CompareOptions) -> Comparison | list[Comparison]:
    """Read, aggregate and print; write the report (of every metric shown) when asked. Returns the
    Comparison, or one per metric for several."""
    if opts.format not in FORMATS:
        raise ConfigError(f"--format {opts.format!r}; choose one of: {', '.join(FORMATS)}")
    records, spec = runs_and_spec(opts)
    metrics = objectives(spec, opts.metric)
    shown, goals = (
        shown_metrics(metrics, records, opts.value)
        if not opts.metric
        else ([m for m, _ in metrics], [d for _, d in metrics])
    )
    selection = ood_selection(shown, records, opts.value, opts.best_over, opts.allow_ood_selection)
    margins, source = declared_margins(opts.margin, spec, shown)
    preconditions, declared = declared_preconditions(opts.precondition, spec, records)
    comps = compare_metrics(
        records, shown, value=opts.value, rows=opts.rows or default_rows(spec, opts.best_over),
        cols=opts.cols, aggregate=opts.aggregate, best_over=opts.best_over, goals=goals, tuned=tuned_keys(spec),
        margins=margins, primary=opts.primary or (spec.get("compare") or {}).get("primary"), margin_source=source,
        interval=opts.interval, preconditions=preconditions, precondition_source=declared,
    )  # fmt: skip
    for comp in comps:
        comp.ood_selection = selection.get(comp.metric)
    if opts.save_runs:
        out_dir = None if opts.wandb or opts.from_runs else opts.out_dir
        size = save_runs(opts.save_runs, records, spec, opts.sweep, shown, command_of(opts), out_dir)
        print(f"saved {len(records)} runs to {opts.save_runs} ({size / 1000:.1f} kB)", file=sys.stderr)
    output(comps, opts.format, per_seed=opts.per_seed, interval=opts.latex_interval, rank=opts.latex_rank,
           explain=opts.explain)  # fmt: skip
    if opts.format == "table":
        print_front(comps[: len(metrics)], [d for _, d in metrics], Console())
    if opts.report:
        from pe_sweeps.compare.report import write_report

        page = write_report(comps, Path(opts.report))
        print(f"report: {page}", file=sys.stderr)
    return comps[0] if len(comps) == 1 else comps


def parse_margin(text: str, where: str) -> float:
    """A margin: a positive finite number, else one line naming `where` it came from."""
    try:
        margin = float(text)
    except (TypeError, ValueError):
        margin = math.nan
    if isinstance(text, bool) or not (math.isfinite(margin) and margin > 0):
        raise ConfigError(f"{where} {text!r}: an equivalence margin is a positive number (e.g. 0.01)")
    return margin


def declared_margins(option: str | None, spec: dict, shown: list[str]) -> tuple[dict, str | None]:
    """({metric or "*": margin}, where it was declared): --margin M or METRIC=M[,...], else the sweep file's
    `compare: {margin: M}` or `{margin: {METRIC: M}}`; ({}, None) when neither declares one."""
    declared = (spec.get("compare") or {}).get("margin")
    if option is None and declared is None:
        return {}, None
    if option is not None:
        entries, source = [e.strip() for e in str(option).split(",") if e.strip()], "with --margin on the command line"
        pairs = [e.rpartition("=")[::2] if "=" in e else ("*", e) for e in entries]
    else:
        source = "in the sweep file"
        pairs = list(declared.items()) if isinstance(declared, dict) else [("*", declared)]
    margins = {}
    for metric, value in pairs:
        metric = metric.strip() or "*"
        if metric != "*" and metric not in shown:
            raise ConfigError(f"margin for {metric!r} ({source}): not a metric shown; choose among: {', '.join(shown)}")
        margins[metric] = parse_margin(value, "--margin" if option is not None else "sweep file compare.margin")
    return margins, source


def declared_preconditions(option: str | None, spec: dict, records) -> tuple[list[Precondition], str | None]:
    """(preconditions, where they were declared): --precondition, else the sweep file's `compare: {precondition}`;
    ([], None) when neither declares one. One judged on a beyond-training-length metric is one line."""
    declared = (spec.get("compare") or {}).get("precondition")
    if option is not None:
        preconditions, source = parse_preconditions(option, "--precondition"), "with --precondition on the command line"
    elif declared is not None:
        preconditions, source = parse_preconditions(declared, "sweep file compare.precondition"), "in the sweep file"
    else:
        return [], None
    for p in preconditions:
        why = beyond_training(p.metric, records)
        if why:
            raise p.error(f"{why}; a precondition is judged on an in-distribution metric (e.g. val/acc)")
    return preconditions, source


def beyond_training(metric: str, records: list[RunRecord]) -> str | None:
    """Why `metric` is measured beyond the training length (None if it is not): an `_ood` metric, a per-length
    accuracy past the runs' `train_max_len`, or a perplexity at a context past their `block_size`."""
    short = metric.rsplit("/", 1)[-1]
    if "_ood" in short:
        return f"{metric} is measured beyond the training length"
    for pattern, key in ((r"_len_(\d+)$", "data.train_max_len"), (r"_ctx_(\d+)", "data.block_size")):
        found = re.search(pattern, short)
        trained = [v for v in (lookup(r, key) for r in records) if isinstance(v, int) and not isinstance(v, bool)]
        if found and trained and int(found[1]) > min(trained):
            return f"{metric} is measured at length {found[1]}, beyond the training length {min(trained)}"
    return None


def refuse_test_fold_selection(shown: list[str], value: str, best_over: str | None) -> None:
    """A test-fold metric (`test/...`, the untouched test set a run reports at its end) is shown as it ended
    (--value final), never selected on: --value best, or a --best-over choice made on it, is one line."""
    for i, metric in enumerate(shown):
        how = ["--value best picks each run's best evaluation of it"] if value == "best" else []
        how += [f"--best-over {best_over} is chosen on it"] if best_over and i == 0 else []
        if metric.startswith("test/") and how:
            raise ConfigError(
                f"{metric} is the untouched test fold: {' and '.join(how)}, which selects on the test set; report it "
                "with --value final and select on a val/ metric (--metric val/...,test/...: --best-over chooses on "
                "the first)"
            )


def ood_selection(shown: list[str], records, value: str, best_over: str | None, allowed: bool) -> dict[str, str]:
    """Selection on a beyond-training-length metric (each run's best validation of it with --value best, or the
    --best-over choice, made on the first metric) is test-set selection: refused in one line unless
    --allow_ood_selection, and then {metric: what was selected on it} for the output to say so. Selection on a
    test-fold metric is refused whatever the option (`refuse_test_fold_selection`)."""
    refuse_test_fold_selection(shown, value, best_over)
    selected = {}
    for i, metric in enumerate(shown):
        why = beyond_training(metric, records)
        if why is None:
            continue
        how = ["--value best picks each run's best validation of it"] if value == "best" else []
        how += [f"--best-over {best_over} is chosen on it"] if best_over and i == 0 else []
        if how and not allowed:
            raise ConfigError(
                f"{why}: {' and '.join(how)}, which selects checkpoints on held-out lengths; use --value final "
                "(or --metric without it), or --allow_ood_selection to show it labelled"
            )
        if how:
            selected[metric] = f"{why}; {' and '.join(how)} (--allow_ood_selection): an optimistic number"
    return selected


def runs_and_spec(opts: CompareOptions) -> tuple[list[RunRecord], dict]:
    """The runs to compare (of --sweep, when given) and the sweep's spec: from a --from file, from W&B, or
    from --out_dir's records and the sweep's manifest or study."""
    if opts.from_runs:
        if opts.wandb:
            raise ConfigError("--from reads runs from a file and --wandb from W&B: pass one of them")
        if opts.save_runs and Path(opts.save_runs).resolve() == Path(opts.from_runs).resolve():
            raise ConfigError(f"--save_runs {opts.save_runs} would overwrite the --from file: name another file")
        saved = read_saved_runs(opts.from_runs)
        return select(saved.records, opts.sweep, f"in {opts.from_runs!r}"), saved.spec
    if opts.wandb:
        records = select(read_wandb(opts.wandb), opts.sweep, f"in W&B project {opts.wandb!r}")
    else:
        records = read_records(opts.out_dir, opts.sweep)
    return records, sweep_spec(opts.out_dir, opts.sweep)


def command_of(opts: CompareOptions) -> str:
    """The compare command line of these options (those left at their default omitted)."""
    default = CompareOptions()
    changed = [
        (f.name, getattr(opts, f.name)) for f in fields(opts) if getattr(opts, f.name) != getattr(default, f.name)
    ]
    args = [f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changed]
    return shlex.join(["python", "cli.py", "compare", *args])


def from_alias(arg: str) -> str:
    """`--from FILE` is `--from_runs FILE` (`from` is a Python keyword, so not an option field's name)."""
    return "--from_runs" + arg[len("--from") :] if arg == "--from" or arg.startswith("--from=") else arg


def compare_main(args: list[str]) -> Comparison | list[Comparison]:
    """`cli.py compare [--out_dir DIR] [--sweep NAME] [--metric M[,M]] [--format F] [--report DIR] ...`"""
    from pe_sweeps.cli_options import parse_options

    return run_compare(parse_options(CompareOptions, [from_alias(a) for a in args]))


def print_comparison(
    out_dir: str = "out",
    sweep: str | None = None,
    metric: str | list[str] | None = None,
    console=None,
    rows: str | None = None,
) -> None:
    """Print the comparison table of a sweep's runs (called at the end of `cli.py sweep`): for one
    objective on the synthetic tasks, in-distribution and beyond-length accuracy side by side; for several
    objectives, each of them and their Pareto front. A problem such as no finished run yet is one line,
    never an exception: whatever fails here is one warning line, so the comparison never changes the exit
    status of the sweep that printed it."""
    console = console or Console()
    try:
        comparison_of(out_dir, sweep, metric, console, rows)
    except Exception as error:  # a bug in the comparison must not fail a sweep whose trials all ran
        command = shlex.join(
            ["python", "cli.py", "compare", f"--out_dir={out_dir}", *([f"--sweep={sweep}"] if sweep else [])]
        )
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        print(f"warning: the comparison could not be printed ({type(error).__name__}: {reason}); the runs are "
              f"saved, compare them with: {command}", file=sys.stderr)  # fmt: skip


def comparison_of(out_dir: str, sweep: str | None, metric, console: Console, rows: str | None) -> None:
    """`print_comparison`'s work, which may raise."""
    try:
        records = read_records(out_dir, sweep)
        spec = sweep_spec(out_dir, sweep)
        metrics = objectives(spec, ",".join(metric) if isinstance(metric, list) else metric)
        shown, goals = shown_metrics(metrics, records)
        margins, source = declared_margins(None, spec, shown)
        preconditions, declared = declared_preconditions(None, spec, records)
        comps = compare_metrics(
            records, shown, rows=rows or default_rows(spec), goals=goals, tuned=tuned_keys(spec), margins=margins,
            primary=(spec.get("compare") or {}).get("primary"), margin_source=source, preconditions=preconditions,
            precondition_source=declared,
        )  # fmt: skip
    except ConfigError as error:
        console.print(f"compare: {error}")
        return
    console.print(render_table(comps))
    print_front(comps[: len(metrics)], [d for _, d in metrics], console)
