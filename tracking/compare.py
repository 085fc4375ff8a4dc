"""`cli.py compare`: runs side by side, rows x columns (encoding x task), mean +- std over seeds.

Each cell: mean (or median, `--aggregate median`), sample std (ddof=1), n and a 95% percentile-bootstrap
interval of that aggregate over seeds (10,000 resamples, fixed RNG seed 0: the interval lies inside the
range of the seeds' values, so never outside the metric's range), printed to two significant digits of
the interval's width; per column a rank (1 = best by the metric's goal, the best cell marked), per row the
mean rank and mean reciprocal rank (the headline of Kazemnejad et al. 2023), and under the table Welch
t-tests of the best row against the runner-up, Holm-adjusted over all pairs of the column when it has
more than two rows, so one noisy seed is not over-read. `--best-over KEY` applies TUPE's fine-tuning
rule (Ke et al. 2021: median over seeds per learning rate, then the best learning rate): per cell only
the value of KEY with the best aggregate is kept, and named. `--metric a,b` shows several metrics side
by side (a `--best-over` choice is made on the first and kept for the others).

Runs that did not finish, lack the metric, repeat a seed, or whose config differs from the rest of
their cell (anything but seed_everything, run.*, trainer.logger and ckpt_path) are left out and listed
with the reason, never averaged in. Reads the local run records (tracking/records.py) or,
with --wandb ENTITY/PROJECT, the same runs from the W&B API.

To run:
    python cli.py compare                                   # every run under out/, val/acc
    python cli.py compare --sweep length_generalization     # that sweep's runs and metric
    python cli.py compare --rows encoding,model.init_args.lr --format markdown
    python cli.py compare --metric val/acc,val/acc_ood --format latex
    python cli.py compare --aggregate median --best-over model.init_args.lr   # TUPE's rule
    python cli.py compare --report out/report               # plots + one HTML page
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

from errors import ConfigError
from layout import STUDY_DB, SWEEPS, study_db
from lightning_modules.metrics import ACC, ACC_OOD, goal, name
from tracking.comparison import (
    INTERVAL,
    Cell,
    Comparison,
    Excluded,
    cell_number,
    cell_text,
    legend,
    lookup,
    notes,
)
from tracking.records import RECORD_FILE, load_records
from tracking.wandb_records import read_wandb

# not "the config": seeds, naming, logging and display options (a progress bar never changes a result)
IGNORED = ("seed_everything", "run", "trainer.logger", "ckpt_path", "sweep", "_wandb", "trainer.enable_progress_bar",
           "trainer.enable_model_summary")  # fmt: skip
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


def comparable_config(record: dict, keys: list[str]) -> dict[str, str]:
    """The resolved config minus the seed, run.*, logger and checkpoint keys and the row/column keys."""
    skip = IGNORED + tuple(keys)
    flat = flatten(record.get("config") or {})
    return {k: json.dumps(v, sort_keys=True) for k, v in flat.items() if not any(_under(k, s) for s in skip)}


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".") or key.endswith("." + prefix)


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
    configs = [comparable_config(r, keys) for r in runs]
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
            cells[row, col, choice] = Cell(kept, [float(r[value][metric]) for r in kept], aggregate, choice)
    return cells, excluded


def check_best_over(records: list[dict], key: str) -> None:
    """--best-over needs a key that takes at least two values among the selected runs."""
    values = {json.dumps(lookup(r, key), sort_keys=True) for r in records}
    if len(values - {"null"}) > 1:
        return
    flat = [flatten(r.get("config") or {}) for r in records]
    varied = sorted(k for k in set().union(*flat) if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1)
    varied = [k for k in varied if not any(_under(k, s) for s in IGNORED)]
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


def rank_columns(comp: Comparison) -> None:
    """Rank the rows of each column by their aggregate (1 = best, ties averaged); per row the mean rank
    and the mean reciprocal rank."""
    sign = -1.0 if comp.goal == "max" else 1.0
    for col in comp.cols:
        rows = [r for r in comp.rows if (r, col) in comp.cells]
        ranks = stats.rankdata([sign * comp.cells[r, col].center for r in rows])
        comp.ranks.update({(r, col): float(k) for r, k in zip(rows, ranks)})
    for row in comp.rows:
        mine = [comp.ranks[row, c] for c in comp.cols if (row, c) in comp.ranks]
        comp.mean_rank[row] = float(np.mean(mine))
        comp.mrr[row] = float(np.mean([1.0 / k for k in mine]))


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
    best_over: str | None = None, chosen: dict | None = None, direction: str | None = None,
) -> Comparison:  # fmt: skip
    """Aggregate records into a Comparison: cells over seeds, ranks, mean ranks, tests, exclusions.
    `chosen` ({(row, col): value}) fixes the --best-over choice (made on another metric); `direction`
    (maximize/minimize, the sweep file's goal) overrides the goal read from the metric's name."""
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
    comp = Comparison(metric, value, row_keys, col_keys, kept, excluded, aggregate=aggregate, best_over=best_over)
    comp.declared_goal = declared
    comp.alternatives = alternatives if best_over else {}
    comp.rows = sorted({r for r, _ in kept})
    comp.cols = sorted({c for _, c in kept})
    rank_columns(comp)
    comp.rows.sort(key=lambda r: (comp.mean_rank[r], r))
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


def footer(comps, best: str = "*") -> list[str]:
    return [line for comp in as_list(comps) for line in [legend(comp, best), *notes(comp)]]


def render_table(comps) -> Table:
    """A rich Table of one or several comparisons (metrics side by side), tests and exclusions as its caption."""
    comps = as_list(comps)
    first = comps[0]
    metrics = ", ".join(c.metric for c in comps)
    title = f"{first.value} {metrics} ({'/'.join(c.goal for c in comps)}), {first.aggregate} ± std over seeds"
    caption = [escape(line) for line in footer(comps)]  # "[...]" is text here, not rich markup
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
            "std": _num(cell.std), "n": cell.n, "ci_low": _num(lo), "ci_high": _num(hi), "rank": comp.ranks[row, col],
            "best": comp.is_best(row, col), "mean_rank": comp.mean_rank[row], "mrr": comp.mrr[row],
            "chosen": cell.chosen, "seeds": [r.get("seed") for r in cell.records],
        })  # fmt: skip
    return out


def to_csv(comps) -> str:
    buffer = io.StringIO()
    rows = [row for comp in as_list(comps) for row in cell_rows(comp)]
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["metric", "row", "col"])
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "seeds": " ".join(map(str, row["seeds"]))})
    return buffer.getvalue()


def comparison_dict(comp: Comparison) -> dict:
    return {
        "metric": comp.metric, "value": comp.value, "goal": comp.goal, "aggregate": comp.aggregate,
        "interval": INTERVAL, "best_over": comp.best_over, "rows": comp.row_keys, "cols": comp.col_keys,
        "cells": cell_rows(comp), "mean_rank": comp.mean_rank, "mrr": comp.mrr, "tests": comp.tests,
        "pairs": comp.pairs, "excluded": [vars(e) for e in comp.excluded],
    }  # fmt: skip


def to_json(comps) -> str:
    """One metric: its comparison; several: {"comparisons": [one per metric]}."""
    comps = as_list(comps)
    data = comparison_dict(comps[0]) if len(comps) == 1 else {"comparisons": [comparison_dict(c) for c in comps]}
    return json.dumps(data, indent=1)


def to_markdown(comps) -> str:
    header, rows = grid_of(comps)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, texts, ranks in rows:
        lines.append("| " + " | ".join([row, *[f"**{t}**" if best else t for t, best in texts], *ranks]) + " |")
    lines += ["", *[re.sub(r"^( *)", r"\1- ", line) for line in footer(comps, "bold")]]
    return "\n".join(lines) + "\n"


LATEX_ESCAPES = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "±": r"$\pm$"}  # fmt: skip


def latex_escape(text: str) -> str:
    return "".join(LATEX_ESCAPES.get(ch, ch) for ch in text)


def to_latex(comps) -> str:
    """A booktabs table (needs \\usepackage{booktabs}); best cells bold; legend, tests and exclusions as its
    footer."""
    header, rows = grid_of(comps)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{l" + "l" * (len(header) - 1) + "}",
             r"\toprule", " & ".join(map(latex_escape, header)) + r" \\", r"\midrule"]  # fmt: skip
    for row, texts, ranks in rows:
        cells = [r"\textbf{" + latex_escape(t) + "}" if best else latex_escape(t) for t, best in texts]
        lines.append(" & ".join([latex_escape(row), *cells, *ranks]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip\footnotesize"]
    lines += [latex_escape(line.strip()) + r"\\" for line in footer(comps, "bold")]
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

    own = study_db(out_dir, sweep)
    for path in [own, *sorted(p for p in (Path(out_dir) / SWEEPS).glob(f"*/{STUDY_DB}") if p != own)]:
        if not path.is_file():
            continue
        try:
            study = optuna.load_study(study_name=sweep, storage=f"sqlite:///{path.resolve()}")
        except KeyError:
            continue
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


def output(comps, fmt_name: str, console: Console | None = None) -> None:
    if fmt_name == "table":
        (console or Console()).print(render_table(comps))
    else:
        print({"csv": to_csv, "json": to_json, "markdown": to_markdown, "latex": to_latex}[fmt_name](comps), end="")


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
    )  # fmt: skip
    output(comps, opts.format)
    if opts.format == "table":
        print_front(comps, [d for _, d in metrics], Console())
    if opts.report:
        from tracking.compare_report import write_report

        page = write_report(comps[0], Path(opts.report))
        print(f"report: {page}", file=sys.stderr)
    return comps[0] if len(comps) == 1 else comps


def compare_main(args: list[str]) -> Comparison | list[Comparison]:
    """`cli.py compare [--out_dir DIR] [--sweep NAME] [--metric M[,M]] [--format F] [--report DIR] ...`"""
    from cli_options import parse_options

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
        comps = compare_metrics(records, shown, rows=rows or default_rows(spec), goals=goals)
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
        from tracking.pareto import front_table

        console.print(front_table(comps, directions))
