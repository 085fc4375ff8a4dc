"""`cli.py compare`: runs side by side, rows x columns (encoding x task), mean +- std over seeds.

Each cell: mean (or median, `--aggregate median`), sample std (ddof=1), n and a 95% interval of that
aggregate over seeds: Student's t for the mean (exact coverage for normal values at any n >= 2), the
order-statistic interval for the median (95% from n = 6; below, [min, max] with its exact level), clipped
to the metric's range (lightning_modules.metrics.bounds) with a clipped end marked; printed to two
significant digits of the interval's width. Per column a rank (1 = best by the metric's goal, the best
cell marked); per row, over the columns, the mean rank, the mean reciprocal rank (the headline of
Kazemnejad et al. 2023) and rliable's IQM over columns x seeds with its stratified-bootstrap interval
(Agarwal et al. 2021), only for the rows with every column and only when every column holds one kind of
run; under the table Welch t-tests of the best row against the runner-up, Holm-adjusted over all pairs
of the column when it has more than two rows, so one noisy seed is not over-read. `--best-over KEY`
applies TUPE's fine-tuning rule (Ke et al. 2021: median over seeds per learning rate, then the best
learning rate): per cell only the value of KEY with the best aggregate is kept, and named. `--metric a,b`
shows several metrics side by side (a `--best-over` choice is made on the first and kept for the others).

A result is defined by SETUP (data, model, optimisation, steps, precision, world size), declared once
below; everything else in a config is ignored. Runs that did not finish, lack the metric, repeat a seed,
or whose setup differs from the rest of their cell are left out and listed with the reason, never
averaged in; a column whose rows differ in setup (beyond the row, column and --best-over keys and the
parameters the sweep tunes) is refused with one line naming the keys. Reads the local run records
(tracking/records.py) or, with --wandb ENTITY/PROJECT, the same runs from the W&B API.

To run:
    python cli.py compare                                   # every run under out/, val/acc
    python cli.py compare --sweep length_generalization     # that sweep's runs and metric
    python cli.py compare --rows encoding,model.init_args.lr --format markdown
    python cli.py compare --metric val/acc,val/acc_ood --format latex
    python cli.py compare --aggregate median --best-over model.init_args.lr   # TUPE's rule
    python cli.py compare --report out/report               # plots + one HTML page
    python cli.py compare --per_seed                        # every cell's per-seed values under the table
    python cli.py compare --wandb my-entity/pe-sweeps
"""

import csv
import io
import itertools
import json
import math
import re
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from scipy import stats

from lightning_modules.metrics import ACC, ACC_OOD, bounds, goal, name
from pe_sweeps.errors import ConfigError
from pe_sweeps.layout import STUDY_DB, SWEEPS, study_db
from pe_sweeps.tracking.across_tasks import IQM_INTERVAL, iqm_interval
from pe_sweeps.tracking.comparison import (
    Cell,
    Comparison,
    Excluded,
    cell_number,
    cell_text,
    legend,
    lookup,
    notes,
    seed_lines,
)
from pe_sweeps.tracking.records import RECORD_FILE, load_records
from pe_sweeps.tracking.wandb_records import read_wandb

# What defines a result, declared once (config paths without `init_args`): runs are replicates of one setup
# when these agree, the seed aside; everything else (logging and its cadence, naming, checkpoints, progress
# bars, validation cadence, data-loader workers, compilation) is ignored. `world_size` and `precision` are
# the record's own fields (tracking/records.py), read from the trainer at fit start.
SETUP = ("data", "model", "optimizer", "lr_scheduler",  # data, model and optimisation
         "trainer.max_steps", "trainer.max_epochs", "trainer.accumulate_grad_batches", "trainer.gradient_clip_val",
         "trainer.gradient_clip_algorithm", "trainer.limit_train_batches", "trainer.limit_val_batches",  # steps
         "trainer.precision", "precision",  # precision
         "trainer.devices", "trainer.num_nodes", "world_size")  # world size  # fmt: skip
# within SETUP but not what defines a result: `data.seed` is a seed (it follows seed_everything), varied like it
NOT_SETUP = ("data.seed", "data.num_workers", "model.compile", "model._class_path", "model._instantiator")
FORMATS = ("table", "csv", "json", "markdown", "latex")
VALUES = ("final", "best")
AGGREGATES = ("mean", "median")
ALPHA = 0.05
DEFAULT_METRIC = name("val", ACC)


@dataclass
class CompareOptions:
    """Options of `cli.py compare`."""

    CHOICES: ClassVar[dict] = {"value": VALUES, "aggregate": AGGREGATES, "format": FORMATS}

    out_dir: str = "out"  # records are read recursively from here (runs/ and sweeps/)
    sweep: str | None = None  # keep runs of this sweep / study only; its metric becomes the default
    metric: str | None = None  # M[,M...]; default: the sweep's metric(s) with --sweep, else val/acc; several
    # metrics: side by side, then their Pareto front (non-dominated rows)
    value: str = "final"  # "final" (last validation) or "best" (best validation, by the metric's goal)
    aggregate: str = "mean"  # over seeds: mean or median (TUPE's rule)
    best_over: str | None = None  # KEY (e.g. model.init_args.lr): per cell keep the KEY value aggregating best
    rows: str | None = None  # comma-separated record fields or dotted config paths; default: encoding, and
    # with --sweep also the parameters that the sweep varies (other than seed, encoding and task)
    cols: str = "task"  # comma-separated record fields or dotted config paths, one column per value
    format: str = "table"  # table (rich, to the console), csv, json, markdown, latex (to stdout)
    per_seed: bool = False  # table, markdown, latex: list every cell's per-seed values under it (csv, json: always)
    report: str | None = None  # write PNG plots and index.html to this folder
    wandb: str | None = None  # ENTITY/PROJECT: read runs from the W&B API instead of --out_dir


# ---------------------------------------------------------------- selecting and grouping runs


def keys_of(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    return [k.strip() for k in spec.split(",") if k.strip()] if isinstance(spec, str) else list(spec)


def label(record: dict, keys: list[str]) -> str:
    values = [lookup(record, k) for k in keys]
    return ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in values)


def run_id(record: dict) -> str:
    return str(record.get("run_dir") or record.get("name"))


def flatten(config: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        out.update(flatten(value, path + ".") if isinstance(value, dict) and value else {path: value})
    return out


def setup_of(record: dict, keys: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """The keys of SETUP in a record (config paths without `init_args`, JSON values), less `keys` (the
    row and column keys: they differ between cells by design)."""
    flat = {config_path(k): v for k, v in flatten(record.get("config") or {}).items()}
    flat |= {k: record[k] for k in ("world_size", "precision") if record.get(k) is not None}
    skip = tuple(config_path(k) for k in keys) + NOT_SETUP
    return {
        k: json.dumps(v, sort_keys=True) for k, v in flat.items()
        if any(_under(k, s) for s in SETUP) and not any(_under(k, s) for s in skip)
    }  # fmt: skip


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def unusable(record: dict, metric: str, value: str, keys: list[str]) -> str | None:
    """Why a run cannot be averaged in (None if it can)."""
    if record.get("status") != "finished":
        return f"status {record.get('status')}"
    missing = [k for k in keys if lookup(record, k) is None]
    if missing:
        return f"no {missing[0]}"
    number = (record.get(value) or {}).get(metric)
    if number is None:
        return f"no {metric}"
    if not math.isfinite(number):
        return f"{metric} is {number}"
    return None


def config_diff(config: dict, kept: dict) -> str:
    diff = sorted(k for k in set(config) | set(kept) if config.get(k) != kept.get(k))
    shown = ", ".join(f"{k}={config.get(k, 'missing')} (kept: {kept.get(k, 'missing')})" for k in diff[:2])
    return shown + (f" and {len(diff) - 2} more" if len(diff) > 2 else "")


def same_config(runs: list[dict], keys: list[str]) -> tuple[list[dict], list[tuple[dict, str]]]:
    """Keep the runs sharing the most common config; the rest (all of them on a tie) are dropped."""
    configs = [setup_of(r, keys) for r in runs]
    signatures = [json.dumps(c, sort_keys=True) for c in configs]
    counts = Counter(signatures).most_common()
    if len(counts) == 1:
        return runs, []
    first, second = (configs[signatures.index(sig)] for sig, _ in counts[:2])
    if counts[0][1] == counts[1][1]:
        why = f"mixed configs, no majority: {config_diff(second, first)}; split them with --rows/--cols"
        return [], [(r, why) for r in runs]
    kept_config = configs[signatures.index(counts[0][0])]
    kept = [r for r, s in zip(runs, signatures) if s == counts[0][0]]
    dropped = [(r, f"config differs: {config_diff(c, kept_config)}") for r, c, s in zip(runs, configs, signatures)]
    return kept, [d for d, s in zip(dropped, signatures) if s != counts[0][0]]


def one_per_seed(runs: list[dict]) -> tuple[list[dict], list[tuple[dict, str]]]:
    """The newest run per seed; older repeats are dropped (a mean over seeds counts each seed once)."""
    newest = {}
    for run in sorted(runs, key=lambda r: r.get("updated_at") or 0):
        newest[run["seed"] if run.get("seed") is not None else id(run)] = run
    kept = list(newest.values())
    dropped = [r for r in runs if not any(r is k for k in kept)]
    return kept, [(r, f"repeats seed {r.get('seed')} (newer run kept)") for r in dropped]


def group_cells(records, metric, value, row_keys, col_keys, aggregate="mean", over=None) -> tuple[dict, list]:
    """Usable runs per (row, col[, value of the --best-over key]) cell, and every excluded run with its reason."""
    groups, excluded = defaultdict(list), []
    keys = row_keys + col_keys + ([over] if over else [])
    for record in records:
        row, col = label(record, row_keys), label(record, col_keys)
        reason = unusable(record, metric, value, keys)
        if reason:
            excluded.append(Excluded(row, col, reason, run_id(record)))
        else:
            groups[row, col, label(record, [over]) if over else None].append(record)
    cells = {}
    for (row, col, choice), runs in sorted(groups.items(), key=lambda item: repr(item[0])):
        kept, dropped = same_config(runs, keys)
        kept, repeats = one_per_seed(kept)
        excluded += [Excluded(row, col, why, run_id(r)) for r, why in dropped + repeats]
        if kept:
            values = [float(r[value][metric]) for r in kept]
            cells[row, col, choice] = Cell(kept, values, aggregate, choice, bounds(metric))
    return cells, excluded


def encoding_keys() -> list[str]:
    """The config paths (without `init_args`) holding an encoding or its options in some task module: the
    row `encoding` differs between rows through them."""
    from lightning_modules.task_modules import TASK_MODULES

    return sorted({f"model.{p}" for m in TASK_MODULES for pair in m.ENCODING_ARGS.values() for p in pair})


def check_columns(cells: dict, keys: list[str]) -> None:
    """A column ranks runs of one setup only: the rows of a column may differ in `keys` (the row, column and
    --best-over keys, the parameters the sweep tunes; with an `encoding` row, the encoding arguments) and in
    nothing else of SETUP. Else one line naming the column, two of its rows and the keys where they differ."""
    free = list(keys) + (encoding_keys() if "encoding" in keys else [])
    by_col = defaultdict(dict)
    for (row, col), cell in sorted(cells.items()):
        by_col[col][row] = setup_of(cell.records[0], free)
    for col, setups in by_col.items():
        (first, kept), *others = setups.items()
        for row, setup in others:
            diff = sorted(k for k in set(kept) | set(setup) if kept.get(k) != setup.get(k))
            if diff:
                shown = ", ".join(f"{k} ({kept.get(k, 'missing')} vs {setup.get(k, 'missing')})" for k in diff[:3])
                more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
                raise ConfigError(
                    f"column {col!r} mixes setups, refusing to rank them: {first} and {row} differ in {shown}{more}; "
                    "split them with --cols task,KEY (or --rows), or select one study with --sweep"
                )


def tuned_keys(spec: dict) -> list[str]:
    """The parameters a sweep varies: each row of its comparison may hold its own setting of them (a reseed
    study's per-encoding choice, TUPE's learning rate)."""
    return [k for k, v in (spec.get("parameters") or {}).items() if "value" not in dict(v)]


def check_best_over(records: list[dict], key: str) -> None:
    """--best-over needs a key that takes at least two values among the selected runs."""
    values = {json.dumps(lookup(r, key), sort_keys=True) for r in records}
    if len(values - {"null"}) > 1:
        return
    flat = [flatten(r.get("config") or {}) for r in records]
    varied = sorted(k for k in set().union(*flat) if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1)
    varied = [k for k in varied if any(_under(config_path(k), s) for s in SETUP)]
    raise ConfigError(f"--best-over {key!r} does not vary among the selected runs (values: {', '.join(sorted(values))})"
                      f"; keys that vary: {', '.join(varied) or 'none'}")  # fmt: skip


def pick_best_over(cells: dict, comp_goal: str, chosen: dict | None = None) -> tuple[dict, dict]:
    """Per (row, col) keep the --best-over value whose aggregate is best (or the one `chosen` names,
    so a second metric follows the first metric's choice); also returns every candidate's aggregate."""
    candidates = defaultdict(dict)
    for (row, col, choice), cell in cells.items():
        candidates[row, col][choice] = cell
    kept, alternatives = {}, {}
    for key, by_choice in candidates.items():
        if chosen is not None:
            if chosen.get(key) in by_choice:
                kept[key] = by_choice[chosen[key]]
        else:
            sign = -1.0 if comp_goal == "max" else 1.0
            kept[key] = min(by_choice.values(), key=lambda c: (sign * c.center, c.chosen))
        alternatives[key] = {c: cell.center for c, cell in by_choice.items()}
    return kept, alternatives


# ---------------------------------------------------------------- statistics


def column_ranks(comp: Comparison, col: str, rows: list[str]) -> dict[str, float]:
    """Ranks of `rows` in a column by their aggregate (1 = best by the goal, ties averaged)."""
    sign = -1.0 if comp.goal == "max" else 1.0
    return dict(zip(rows, map(float, stats.rankdata([sign * comp.cells[r, col].center for r in rows]))))


def rank_columns(comp: Comparison) -> None:
    """Rank the rows of each column (the #rank of each cell), then the across-column aggregates."""
    for col in comp.cols:
        ranks = column_ranks(comp, col, [r for r in comp.rows if (r, col) in comp.cells])
        comp.ranks.update({(r, col): k for r, k in ranks.items()})
    aggregate_rows(comp)


def kind_of(comp: Comparison, col: str) -> str:
    """A column's kind of run: the class of its task module (synthetic, causal LM, masked LM, classifier...)."""
    records = [r for (_, c), cell in comp.cells.items() if c == col for r in cell.records]
    return "+".join(sorted({str(lookup(r, "model.class_path")).rsplit(".", 1)[-1] for r in records}))


def aggregate_rows(comp: Comparison) -> None:
    """Mean rank, mean reciprocal rank (Kazemnejad et al. 2023) and IQM with its stratified-bootstrap interval
    (rliable, Agarwal et al. 2021) per row, over every column. Only over columns of one kind of run (the
    same metric name means different things for, e.g., a synthetic task and a masked LM), and only for the
    rows with a cell in every column, ranked among themselves: a row missing its worst column would
    otherwise rank better. The rows left out are listed in `comp.missing`."""
    comp.kinds = {col: kind_of(comp, col) for col in comp.cols}
    if len(set(comp.kinds.values())) > 1:
        groups = defaultdict(list)
        for col, kind in comp.kinds.items():
            groups[kind].append(col)
        shown = "; ".join(f"{kind}: {', '.join(cols)}" for kind, cols in sorted(groups.items()))
        comp.no_aggregate = f"the columns hold different kinds of run ({shown}); compare each kind on its own"
        return
    comp.missing = {r: [c for c in comp.cols if (r, c) not in comp.cells] for r in comp.rows}
    comp.missing = {r: cols for r, cols in comp.missing.items() if cols}
    complete = [r for r in comp.rows if r not in comp.missing]
    if not complete:
        return
    ranks = [column_ranks(comp, col, complete) for col in comp.cols]
    for row in complete:
        mine = [by_row[row] for by_row in ranks]
        comp.mean_rank[row] = float(np.mean(mine))
        comp.mrr[row] = float(np.mean([1.0 / k for k in mine]))
        comp.iqm[row] = iqm_interval([comp.cells[row, col].values for col in comp.cols])


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979): the i-th smallest of m p-values times (m - i + 1),
    made monotone and capped at 1; returned in the input order."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for position, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - position) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def welch_p(a: Cell, b: Cell) -> float:
    if a.n < 2 or b.n < 2:
        return math.nan
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return float(stats.ttest_ind(a.values, b.values, equal_var=False).pvalue)


def pairwise(comp: Comparison, col: str) -> list[dict]:
    """Welch t-tests of every pair of rows in a column (in rank order), Holm-adjusted over the testable pairs."""
    ordered = [r for _, r in sorted((comp.ranks[r, col], r) for r in comp.rows if (r, col) in comp.ranks)]
    pairs = [{"a": a, "b": b, "p": welch_p(comp.cells[a, col], comp.cells[b, col])}
             for a, b in itertools.combinations(ordered, 2)]  # fmt: skip
    testable = [p for p in pairs if not math.isnan(p["p"])]
    for pair, adjusted in zip(testable, holm([p["p"] for p in testable])):
        pair["p_holm"] = adjusted
    return pairs


def welch_statement(comp: Comparison, col: str) -> str:
    """Is the best row of a column separated from the runner-up? Welch's t-test over seeds, Holm-adjusted
    over all pairs of the column when it has more than two rows."""
    pairs = comp.pairs[col]
    if not pairs:
        return f"{col}: one row only, nothing to compare"
    top = pairs[0]  # best vs runner-up
    a, b = comp.cells[top["a"], col], comp.cells[top["b"], col]
    head = f"{col}: {top['a']} ({cell_number(a.center, a)}) vs runner-up {top['b']} ({cell_number(b.center, b)}):"
    if a.n < 2 or b.n < 2:
        return f"{head} n<2, not testable"
    if math.isnan(top["p"]):
        return f"{head} identical values, not testable"
    tested = [p for p in pairs if "p_holm" in p]
    p = top["p_holm"]
    verdict = f"separated at {ALPHA}" if p < ALPHA else f"NOT separated at {ALPHA} (could be seed noise)"
    if len(pairs) == 1:
        return f"{head} Welch t-test p={p:.2g}, {verdict}"
    separated = sum(q["p_holm"] < ALPHA for q in tested)
    return (f"{head} Welch t-test p={top['p']:.2g}, Holm-adjusted over {len(tested)} pairs p={p:.2g}, {verdict}; "
            f"{separated} of {len(tested)} pairs separated")  # fmt: skip


def compare(
    records: list[dict], metric: str, value: str = "final", rows="encoding", cols="task", aggregate: str = "mean",
    best_over: str | None = None, chosen: dict | None = None, direction: str | None = None, tuned=(),
) -> Comparison:  # fmt: skip
    """Aggregate records into a Comparison: cells over seeds, ranks, mean ranks, tests, exclusions.
    `chosen` ({(row, col): value}) fixes the --best-over choice (made on another metric); `direction`
    (maximize/minimize, the sweep file's goal) overrides the goal read from the metric's name; `tuned`: keys
    the rows of a column may differ in besides the row keys (the parameters a sweep tunes)."""
    if value not in VALUES:
        raise ConfigError(f"--value {value!r}; choose one of: {', '.join(VALUES)}")
    if aggregate not in AGGREGATES:
        raise ConfigError(f"--aggregate {aggregate!r}; choose one of: {', '.join(AGGREGATES)}")
    check_metric(records, metric, value)
    if best_over:
        check_best_over(records, best_over)
    row_keys, col_keys = keys_of(rows), keys_of(cols)
    cells, excluded = group_cells(records, metric, value, row_keys, col_keys, aggregate, best_over)
    declared = direction[:3] if direction else None  # maximize -> max
    kept, alternatives = pick_best_over(cells, declared or goal(metric), chosen)
    check_columns(kept, row_keys + col_keys + ([best_over] if best_over else []) + list(tuned))
    comp = Comparison(metric, value, row_keys, col_keys, kept, excluded, aggregate=aggregate, best_over=best_over)
    comp.declared_goal = declared
    comp.alternatives = alternatives if best_over else {}
    comp.rows = sorted({r for r, _ in kept})
    comp.cols = sorted({c for _, c in kept})
    rank_columns(comp)
    comp.rows.sort(key=lambda r: (comp.mean_rank.get(r, math.inf), r))
    comp.pairs = {c: pairwise(comp, c) for c in comp.cols}
    comp.tests = {c: welch_statement(comp, c) for c in comp.cols}
    return comp


def compare_metrics(
    records: list[dict], metrics: list[str], goals: list[str | None] | None = None, **kwargs
) -> list["Comparison"]:
    """One Comparison per metric; a --best-over choice is made on the first metric and kept for the rest
    (so, e.g., a learning rate is never chosen on a beyond-length metric listed second). `goals`: per
    metric, the sweep file's direction (maximize/minimize) or None (goal by the metric's name)."""
    goals = list(goals or [None] * len(metrics))
    first = compare(records, metrics[0], direction=goals[0], **kwargs)
    chosen = {key: cell.chosen for key, cell in first.cells.items()} if kwargs.get("best_over") else None
    return [first] + [compare(records, m, chosen=chosen, direction=d, **kwargs) for m, d in zip(metrics[1:], goals[1:])]


def check_metric(records: list[dict], metric: str, value: str) -> None:
    logged = {m for r in records for m in (r.get(value) or {})}
    if metric not in logged:
        short = sorted({re.sub(r"_(\d+)$", "_<n>", m) for m in logged})
        raise ConfigError(f"metric {metric!r} was not logged by any selected run; available: {', '.join(short)}")


# ---------------------------------------------------------------- text, rich and machine formats


def as_list(comps) -> list[Comparison]:
    return [comps] if isinstance(comps, Comparison) else list(comps)


def grid_of(comps) -> tuple[list[str], list[tuple[str, list[tuple[str, bool]], list[str]]]]:
    """Header and rows shared by the table, markdown and LaTeX: one column per (column, metric), then per
    metric the mean rank and mean reciprocal rank. Rows follow the first metric's mean rank."""
    comps = as_list(comps)
    many = len(comps) > 1
    header = [", ".join(comps[0].row_keys)]
    header += [f"{c} {comp.metric}" if many else c for comp in comps for c in comp.cols]
    header += [f"{k} {comp.metric}" if many else k for comp in comps for k in ("mean rank", "MRR")]
    rows = list(dict.fromkeys(r for comp in comps for r in comp.rows))
    out = []
    for row in rows:
        texts = [
            (cell_text(comp.cells[row, c], comp.ranks[row, c], False), comp.is_best(row, c))
            if (row, c) in comp.cells else ("-", False)
            for comp in comps for c in comp.cols
        ]  # fmt: skip
        ranks = [f"{comp.mean_rank[row]:.2f}" if row in comp.mean_rank else "-" for comp in comps]
        mrr = [f"{comp.mrr[row]:.2f}" if row in comp.mrr else "-" for comp in comps]
        out.append((row, texts, [x for pair in zip(ranks, mrr) for x in pair]))
    return header, out


def footer(comps, best: str = "*", per_seed: bool = False) -> list[str]:
    lines = [line for comp in as_list(comps) for line in [legend(comp, best), *notes(comp)]]
    return lines + ([line for comp in as_list(comps) for line in seed_lines(comp)] if per_seed else [])


def render_table(comps, per_seed: bool = False) -> Table:
    """A rich Table of one or several comparisons (metrics side by side), tests and exclusions as its caption."""
    comps = as_list(comps)
    first = comps[0]
    metrics = ", ".join(c.metric for c in comps)
    title = f"{first.value} {metrics} ({'/'.join(c.goal for c in comps)}), {first.aggregate} ± std over seeds"
    caption = [escape(line) for line in footer(comps, per_seed=per_seed)]  # "[...]" is text here, not rich markup
    width = min(max(map(len, caption)), 160)  # wide enough for the caption lines not to wrap
    table = Table(title=title, caption="\n".join(caption), caption_justify="left", min_width=width)
    header, rows = grid_of(comps)
    for name_ in header:
        table.add_column(name_, overflow="fold", justify="right" if "rank" in name_ or "MRR" in name_ else "left")
    for row, texts, ranks in rows:
        table.add_row(
            escape(row), *[f"[bold green]* {escape(t)}[/]" if best else escape(t) for t, best in texts], *ranks
        )
    return table


def comparison_table(records: list[dict], metric: str, value: str = "final", rows="encoding", cols="task") -> Table:
    """The rich comparison table of records (see `compare` for what is aggregated and excluded)."""
    return render_table(compare(records, metric, value, rows, cols))


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def cell_rows(comp: Comparison) -> list[dict]:
    """One dict per cell: the long format behind csv and json."""
    out = []
    for (row, col), cell in sorted(comp.cells.items()):
        lo, hi = cell.ci
        out.append({
            "metric": comp.metric, "row": row, "col": col, "mean": cell.mean, "median": float(np.median(cell.values)),
            "std": _num(cell.std), "n": cell.n, "ci_low": _num(lo), "ci_high": _num(hi),
            "ci_level": cell.interval.level if cell.n > 1 else None, "ci_clipped": list(cell.interval.clipped),
            "rank": comp.ranks[row, col], "best": comp.is_best(row, col), "mean_rank": comp.mean_rank.get(row),
            "mrr": comp.mrr.get(row), "chosen": cell.chosen, "seeds": [r.get("seed") for r in cell.records],
            "values": cell.values,
        })  # fmt: skip
    return out


def to_csv(comps) -> str:
    buffer = io.StringIO()
    rows = [row for comp in as_list(comps) for row in cell_rows(comp)]
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["metric", "row", "col"])
    writer.writeheader()
    for row in rows:
        lists = {k: " ".join(map(str, row[k])) for k in ("seeds", "values", "ci_clipped")}
        writer.writerow({**row, **lists})
    return buffer.getvalue()


def comparison_dict(comp: Comparison) -> dict:
    return {
        "metric": comp.metric, "value": comp.value, "goal": comp.goal, "aggregate": comp.aggregate,
        "interval": comp.interval, "best_over": comp.best_over, "rows": comp.row_keys, "cols": comp.col_keys,
        "cells": cell_rows(comp), "mean_rank": comp.mean_rank, "mrr": comp.mrr,
        "iqm": {row: dict(zip(("iqm", "ci_low", "ci_high"), v)) for row, v in comp.iqm.items()},
        "iqm_interval": IQM_INTERVAL, "missing": comp.missing, "kinds": comp.kinds,
        "no_aggregate": comp.no_aggregate, "tests": comp.tests,
        "pairs": comp.pairs, "excluded": [vars(e) for e in comp.excluded],
    }  # fmt: skip


def to_json(comps) -> str:
    """One metric: its comparison; several: {"comparisons": [one per metric]}."""
    comps = as_list(comps)
    data = comparison_dict(comps[0]) if len(comps) == 1 else {"comparisons": [comparison_dict(c) for c in comps]}
    return json.dumps(data, indent=1)


def to_markdown(comps, per_seed: bool = False) -> str:
    header, rows = grid_of(comps)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, texts, ranks in rows:
        lines.append("| " + " | ".join([row, *[f"**{t}**" if best else t for t, best in texts], *ranks]) + " |")
    lines += ["", *[re.sub(r"^( *)", r"\1- ", line) for line in footer(comps, "bold", per_seed)]]
    return "\n".join(lines) + "\n"


LATEX_ESCAPES = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "±": r"$\pm$",
                 "†": r"$^\dagger$"}  # fmt: skip


def latex_escape(text: str) -> str:
    return "".join(LATEX_ESCAPES.get(ch, ch) for ch in text)


def to_latex(comps, per_seed: bool = False) -> str:
    """A booktabs table (needs \\usepackage{booktabs}); best cells bold; legend, tests and exclusions as its
    footer."""
    header, rows = grid_of(comps)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{l" + "l" * (len(header) - 1) + "}",
             r"\toprule", " & ".join(map(latex_escape, header)) + r" \\", r"\midrule"]  # fmt: skip
    for row, texts, ranks in rows:
        cells = [r"\textbf{" + latex_escape(t) + "}" if best else latex_escape(t) for t, best in texts]
        lines.append(" & ".join([latex_escape(row), *cells, *ranks]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip\footnotesize"]
    lines += [latex_escape(line.strip()) + r"\\" for line in footer(comps, "bold", per_seed)]
    return "\n".join(lines + [r"\end{table}"]) + "\n"


# ---------------------------------------------------------------- entry points


def read_records(out_dir: str, sweep: str | None) -> list[dict]:
    """Local records under out_dir (recursively), those of one sweep when given."""
    records = load_records(Path(out_dir))
    if not records:
        raise ConfigError(f"no run records ({RECORD_FILE}) under {str(Path(out_dir).resolve())!r}")
    return select(records, sweep, f"under {out_dir!r}")


def select(records: list[dict], sweep: str | None, where: str) -> list[dict]:
    if sweep is None:
        return records
    kept = [r for r in records if r.get("sweep") == sweep]
    if not kept:
        known = sorted({str(r.get("sweep")) for r in records if r.get("sweep")})
        raise ConfigError(f"no runs of sweep {sweep!r} {where}; sweeps found: {', '.join(known) or 'none'}")
    return kept


def sweep_spec(out_dir: str, sweep: str | None) -> dict:
    """The sweep dict of a local Optuna study: in out_dir/sweeps/<sweep>/optuna.db, or in the database of
    the sweep file it was made from (`--set`, `--reseed` studies share one); {} if there is none."""
    if sweep is None:
        return {}
    import optuna
    import sqlalchemy

    from pe_sweeps.tracking.storage import storage_error

    own = study_db(out_dir, sweep)
    for path in [own, *sorted(p for p in (Path(out_dir) / SWEEPS).glob(f"*/{STUDY_DB}") if p != own)]:
        if not path.is_file():
            continue
        url = f"sqlite:///{path.resolve()}"
        try:
            study = optuna.load_study(study_name=sweep, storage=url)
        except KeyError:
            continue
        except (sqlalchemy.exc.SQLAlchemyError, RuntimeError) as error:  # corrupt, or another Optuna's schema
            raise storage_error(url, error) from None
        spec = dict(study.user_attrs.get("sweep") or {})
        if study.user_attrs.get("compare_rows"):  # a reseed study: one row per tuned group (tracking/reseed.py)
            spec["compare_rows"] = study.user_attrs["compare_rows"]
        return spec
    return {}


def default_rows(spec: dict, best_over: str | None = None) -> str:
    """encoding, plus the parameters a sweep varies (seed, encoding and task aside, and the --best-over key,
    which is chosen within each cell): one row per setting; for a reseed study, its groups (each cell then
    holds that group's chosen setting)."""
    if spec.get("compare_rows"):
        return spec["compare_rows"]
    from lightning_modules.task_modules import encoding_parameters

    # a run's `encoding` holds every parameter a task module declares as an encoding
    fixed = {"seed_everything", "data.task", "data.init_args.task"} | encoding_parameters()
    chosen = config_path(best_over) if best_over else None
    varied = [k for k, v in (spec.get("parameters") or {}).items()
              if k not in fixed and "value" not in dict(v) and config_path(k) != chosen]  # fmt: skip
    return ",".join(["encoding", *varied])


def config_path(key: str) -> str:
    """`model.init_args.lr` and `model.lr` name the same setting (LightningCLI accepts both)."""
    return ".".join(part for part in key.split(".") if part != "init_args")


def output(comps, fmt_name: str, console: Console | None = None, per_seed: bool = False) -> None:
    if fmt_name == "table":
        (console or Console()).print(render_table(comps, per_seed))
    elif fmt_name in ("markdown", "latex"):
        print({"markdown": to_markdown, "latex": to_latex}[fmt_name](comps, per_seed), end="")
    else:
        print({"csv": to_csv, "json": to_json}[fmt_name](comps), end="")


def side_by_side(metric: str, records: list[dict], value: str = "final") -> list[str]:
    """The sweep's metric and, for the synthetic tasks, its in-distribution / beyond-length companion
    (`val/acc` with `val/acc_ood`), the sweep's own metric first."""
    stage, _, short = metric.rpartition("/")
    if short not in (ACC, ACC_OOD) or not stage:
        return [metric]
    other = name(stage, ACC_OOD if short == ACC else ACC)
    logged = any(other in (r.get(value) or {}) for r in records)
    return [metric, other] if logged else [metric]


def run_compare(opts: CompareOptions) -> Comparison | list[Comparison]:
    """Read, aggregate and print; write the report (of the first metric) when asked. Returns the
    Comparison, or one per metric for several."""
    if opts.format not in FORMATS:
        raise ConfigError(f"--format {opts.format!r}; choose one of: {', '.join(FORMATS)}")
    if opts.wandb:
        records = select(read_wandb(opts.wandb), opts.sweep, f"in W&B project {opts.wandb!r}")
    else:
        records = read_records(opts.out_dir, opts.sweep)
    spec = sweep_spec(opts.out_dir, opts.sweep)
    metrics = objectives(spec, opts.metric)
    comps = compare_metrics(
        records, [m for m, _ in metrics], value=opts.value, rows=opts.rows or default_rows(spec, opts.best_over),
        cols=opts.cols, aggregate=opts.aggregate, best_over=opts.best_over, goals=[d for _, d in metrics],
        tuned=tuned_keys(spec),
    )  # fmt: skip
    output(comps, opts.format, per_seed=opts.per_seed)
    if opts.format == "table":
        print_front(comps, [d for _, d in metrics], Console())
    if opts.report:
        from pe_sweeps.tracking.compare_report import write_report

        page = write_report(comps[0], Path(opts.report))
        print(f"report: {page}", file=sys.stderr)
    return comps[0] if len(comps) == 1 else comps


def compare_main(args: list[str]) -> Comparison | list[Comparison]:
    """`cli.py compare [--out_dir DIR] [--sweep NAME] [--metric M[,M]] [--format F] [--report DIR] ...`"""
    from pe_sweeps.cli_options import parse_options

    return run_compare(parse_options(CompareOptions, args))


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
    never an exception."""
    console = console or Console()
    try:
        records = read_records(out_dir, sweep)
        spec = sweep_spec(out_dir, sweep)
        metrics = objectives(spec, ",".join(metric) if isinstance(metric, list) else metric)
        declared = dict(metrics)
        shown = side_by_side(metrics[0][0], records) if len(metrics) == 1 else list(declared)
        goals = [declared.get(m) for m in shown]  # the companion (e.g. val/acc_ood) goes by its name
        comps = compare_metrics(records, shown, rows=rows or default_rows(spec), goals=goals, tuned=tuned_keys(spec))
    except ConfigError as error:
        console.print(f"compare: {error}")
        return
    console.print(render_table(comps))
    print_front(comps[: len(metrics)], [d for _, d in metrics], console)


def objectives(spec: dict, metric: str | None) -> list[tuple[str, str]]:
    """(metric, Optuna direction) pairs: --metric (comma-separated for several), else the sweep's
    `metrics` / `metric`, else val/acc. A goal comes from the sweep file when it names the metric, else
    from the metric's name (`lightning_modules.metrics.goal`)."""
    declared = {m["name"]: m.get("goal", "minimize") for m in spec.get("metrics") or [spec.get("metric") or {}] if m}
    names = keys_of(metric) if metric else list(declared) or [DEFAULT_METRIC]
    return [(m, declared.get(m) or ("maximize" if goal(m) == "max" else "minimize")) for m in names]


def print_front(comps: list[Comparison], directions: list[str], console: Console) -> None:
    """The Pareto front beside the per-metric tables (several objectives only)."""
    if len(comps) > 1:
        from pe_sweeps.tracking.pareto import front_table

        console.print(front_table(comps, directions))
