"""`cli.py compare`: runs side by side, rows x columns (encoding x task), mean +- std over seeds.

Each cell: mean, sample std (ddof=1), n and a 95% t-interval over seeds; per column a rank (1 = best by
the metric's goal, the best cell marked), per row the mean rank (the headline of Kazemnejad et al.
2023), and under the table a Welch t-test of the best row against the runner-up, so one noisy seed is
not over-read. Runs that did not finish, lack the metric, repeat a seed, or whose config differs from
the rest of their cell (anything but seed_everything, run.*, trainer.logger and ckpt_path) are left
out and listed with the reason, never averaged in. Reads the local run records (tracking/records.py)
or, with --wandb ENTITY/PROJECT, the same runs from the W&B API.

To run:
    python cli.py compare                                   # every run under out/, val/acc
    python cli.py compare --sweep length_generalization     # that sweep's runs and metric
    python cli.py compare --rows encoding,model.init_args.lr --format markdown
    python cli.py compare --report out/report               # plots + one HTML page
    python cli.py compare --wandb my-entity/pe-sweeps
"""

import csv
import io
import json
import math
import re
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy import stats

from lightning_modules.errors import ConfigError
from lightning_modules.metrics import ACC, goal, name
from tracking.records import RECORD_FILE, load_records
from tracking.wandb_records import read_wandb

IDENTITY = ("name", "group", "task", "encoding", "seed", "sweep", "subcommand", "status")
IGNORED = ("seed_everything", "run", "trainer.logger", "ckpt_path", "sweep", "_wandb")  # not "the config"
FORMATS = ("table", "csv", "json", "markdown")
VALUES = ("final", "best")
ALPHA = 0.05
DEFAULT_METRIC = name("val", ACC)


@dataclass
class CompareOptions:
    """Options of `cli.py compare`."""

    out_dir: str = "out"  # records are read recursively from here (runs/ and sweeps/)
    sweep: str | None = None  # keep runs of this sweep / study only; its metric becomes the default
    metric: str | None = None  # default: the sweep's metric(s) with --sweep, else val/acc; comma-separated for
    # several objectives: a table each, then their Pareto front
    value: str = "final"  # "final" (last validation) or "best" (best validation, by the metric's goal)
    rows: str | None = None  # comma-separated record fields or dotted config paths; default: encoding, and
    # with --sweep also the parameters that the sweep varies (other than seed, encoding and task)
    cols: str = "task"
    format: str = "table"  # table (rich, to the console), csv, json, markdown (to stdout)
    report: str | None = None  # write PNG plots and index.html to this folder
    wandb: str | None = None  # ENTITY/PROJECT: read runs from the W&B API instead of --out_dir


@dataclass
class Cell:
    """The runs of one (row, column) cell and their statistics over seeds."""

    records: list[dict]
    values: list[float]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def std(self) -> float:
        return float(np.std(self.values, ddof=1)) if self.n > 1 else math.nan

    @property
    def ci(self) -> tuple[float, float]:
        """95% t-interval of the mean (NaN for n < 2)."""
        if self.n < 2:
            return math.nan, math.nan
        half = stats.t.ppf(0.975, self.n - 1) * self.std / math.sqrt(self.n)
        return self.mean - half, self.mean + half


@dataclass
class Excluded:
    """A run left out of the table, and why."""

    row: str
    col: str
    reason: str
    run: str


@dataclass
class Comparison:
    """Everything the table, the machine formats and the report show."""

    metric: str
    value: str
    row_keys: list[str]
    col_keys: list[str]
    cells: dict[tuple[str, str], Cell]
    excluded: list[Excluded]
    rows: list[str] = field(default_factory=list)
    cols: list[str] = field(default_factory=list)
    ranks: dict[tuple[str, str], float] = field(default_factory=dict)
    mean_rank: dict[str, float] = field(default_factory=dict)
    tests: dict[str, str] = field(default_factory=dict)

    @property
    def goal(self) -> str:
        return goal(self.metric)

    def is_best(self, row: str, col: str) -> bool:
        return self.ranks.get((row, col)) == min(self.ranks[r, col] for r in self.rows if (r, col) in self.ranks)


# ---------------------------------------------------------------- selecting and grouping runs


def keys_of(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    return [k.strip() for k in spec.split(",") if k.strip()] if isinstance(spec, str) else list(spec)


def lookup(record: dict, key: str):
    """A record field (`encoding`) or a dotted config path (`model.init_args.dim`, or `model.dim`);
    None when absent. Flat configs (W&B) are looked up by the whole key, then by its last part."""
    if key in IDENTITY or ("." not in key and key in record):
        return record.get(key)
    config = record.get("config") or {}
    parts = key.split(".")
    for path in (parts, parts[:1] + ["init_args"] + parts[1:]):
        node = config
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return node
    return config.get(key, config.get(parts[-1]) if len(parts) > 1 else None)


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


def group_cells(records, metric, value, row_keys, col_keys) -> tuple[dict, list[Excluded]]:
    """Usable runs per (row, col) cell, and every excluded run with its reason."""
    groups, excluded = defaultdict(list), []
    for record in records:
        row, col = label(record, row_keys), label(record, col_keys)
        reason = unusable(record, metric, value, row_keys + col_keys)
        if reason:
            excluded.append(Excluded(row, col, reason, run_id(record)))
        else:
            groups[row, col].append(record)
    cells = {}
    for (row, col), runs in sorted(groups.items()):
        kept, dropped = same_config(runs, row_keys + col_keys)
        kept, repeats = one_per_seed(kept)
        excluded += [Excluded(row, col, why, run_id(r)) for r, why in dropped + repeats]
        if kept:
            cells[row, col] = Cell(kept, [float(r[value][metric]) for r in kept])
    return cells, excluded


# ---------------------------------------------------------------- statistics


def rank_columns(comp: Comparison) -> None:
    """Rank the rows of each column (1 = best, ties averaged) and average each row's ranks."""
    sign = -1.0 if comp.goal == "max" else 1.0
    for col in comp.cols:
        rows = [r for r in comp.rows if (r, col) in comp.cells]
        ranks = stats.rankdata([sign * comp.cells[r, col].mean for r in rows])
        comp.ranks.update({(r, col): float(k) for r, k in zip(rows, ranks)})
    for row in comp.rows:
        mine = [comp.ranks[row, c] for c in comp.cols if (row, c) in comp.ranks]
        comp.mean_rank[row] = float(np.mean(mine))


def welch_statement(comp: Comparison, col: str) -> str:
    """Is the best row of a column separated from the runner-up? Welch's t-test over seeds."""
    ordered = sorted((comp.ranks[r, col], r) for r in comp.rows if (r, col) in comp.ranks)
    if len(ordered) < 2:
        return f"{col}: one row only, nothing to compare"
    (_, best), (_, second) = ordered[:2]
    a, b = comp.cells[best, col], comp.cells[second, col]
    head = f"{col}: {best} ({a.mean:.4g}) vs runner-up {second} ({b.mean:.4g}):"
    if a.n < 2 or b.n < 2:
        return f"{head} n<2, not testable"
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        p = stats.ttest_ind(a.values, b.values, equal_var=False).pvalue
    if math.isnan(p):
        return f"{head} identical values, not testable"
    verdict = f"separated at {ALPHA}" if p < ALPHA else f"NOT separated at {ALPHA} (could be seed noise)"
    return f"{head} Welch t-test p={p:.3g}, {verdict}"


def compare(records: list[dict], metric: str, value: str = "final", rows="encoding", cols="task") -> Comparison:
    """Aggregate records into a Comparison: cells over seeds, ranks, mean ranks, Welch tests, exclusions."""
    if value not in VALUES:
        raise ConfigError(f"--value {value!r}; choose one of: {', '.join(VALUES)}")
    check_metric(records, metric, value)
    row_keys, col_keys = keys_of(rows), keys_of(cols)
    cells, excluded = group_cells(records, metric, value, row_keys, col_keys)
    comp = Comparison(metric, value, row_keys, col_keys, cells, excluded)
    comp.rows = sorted({r for r, _ in cells})
    comp.cols = sorted({c for _, c in cells})
    rank_columns(comp)
    comp.rows.sort(key=lambda r: (comp.mean_rank[r], r))
    comp.tests = {c: welch_statement(comp, c) for c in comp.cols}
    return comp


def check_metric(records: list[dict], metric: str, value: str) -> None:
    logged = {m for r in records for m in (r.get(value) or {})}
    if metric not in logged:
        short = sorted({re.sub(r"_(\d+)$", "_<n>", m) for m in logged})
        raise ConfigError(f"metric {metric!r} was not logged by any selected run; available: {', '.join(short)}")


# ---------------------------------------------------------------- text, rich and machine formats


def fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.4g}"


def cell_text(cell: Cell, rank: float, best: bool) -> str:
    spread = "" if cell.n < 2 else f" ± {fmt(cell.std)}"
    lo, hi = cell.ci
    ci = "" if cell.n < 2 else f" [{fmt(lo)}, {fmt(hi)}]"
    return f"{'* ' if best else ''}{fmt(cell.mean)}{spread} (n={cell.n}){ci} #{rank:g}"


def legend(comp: Comparison, best: str = "*") -> str:
    return f"{best}: best in column ({comp.goal} of {comp.value} {comp.metric}); #rank in column; [95% CI]"


def notes(comp: Comparison) -> list[str]:
    """Lines printed under the table: the Welch tests, then excluded runs counted by cell and reason."""
    lines = [comp.tests[c] for c in comp.cols]
    by_reason = Counter((e.row, e.col, e.reason) for e in comp.excluded)
    if by_reason:
        lines.append(f"excluded {len(comp.excluded)} run(s):")
        lines += [f"  {row} / {col}: {n} x {reason}" for (row, col, reason), n in sorted(by_reason.items())]
    return lines


def render_table(comp: Comparison) -> Table:
    """A rich Table of the comparison, with the Welch tests and exclusions as its caption."""
    title = f"{comp.value} {comp.metric} ({comp.goal}), mean ± std over seeds"
    caption = [legend(comp), *notes(comp)]
    width = min(max(map(len, caption)), 160)  # wide enough for the caption lines not to wrap
    table = Table(title=title, caption="\n".join(caption), caption_justify="left", min_width=width)
    table.add_column(", ".join(comp.row_keys))
    for col in comp.cols:
        table.add_column(col, overflow="fold")
    table.add_column("mean rank", justify="right")
    for row in comp.rows:
        texts = [
            cell_text(comp.cells[row, c], comp.ranks[row, c], comp.is_best(row, c)) if (row, c) in comp.cells else "-"
            for c in comp.cols
        ]
        styled = [f"[bold green]{t}[/]" if t.startswith("* ") else t for t in texts]
        table.add_row(row, *styled, f"{comp.mean_rank[row]:.2f}")
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
            "row": row, "col": col, "mean": cell.mean, "std": _num(cell.std), "n": cell.n,
            "ci_low": _num(lo), "ci_high": _num(hi), "rank": comp.ranks[row, col], "best": comp.is_best(row, col),
            "mean_rank": comp.mean_rank[row], "seeds": [r.get("seed") for r in cell.records],
        })  # fmt: skip
    return out


def to_csv(comp: Comparison) -> str:
    buffer = io.StringIO()
    rows = cell_rows(comp)
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["row", "col"])
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "seeds": " ".join(map(str, row["seeds"]))})
    return buffer.getvalue()


def to_json(comp: Comparison) -> str:
    return json.dumps({
        "metric": comp.metric, "value": comp.value, "goal": comp.goal,
        "rows": comp.row_keys, "cols": comp.col_keys, "cells": cell_rows(comp), "mean_rank": comp.mean_rank,
        "tests": comp.tests, "excluded": [vars(e) for e in comp.excluded],
    }, indent=1)  # fmt: skip


def to_markdown(comp: Comparison) -> str:
    header = [", ".join(comp.row_keys), *comp.cols, "mean rank"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in comp.rows:
        texts = []
        for c in comp.cols:
            text = cell_text(comp.cells[row, c], comp.ranks[row, c], False) if (row, c) in comp.cells else "-"
            texts.append(f"**{text}**" if comp.is_best(row, c) and (row, c) in comp.cells else text)
        lines.append("| " + " | ".join([row, *texts, f"{comp.mean_rank[row]:.2f}"]) + " |")
    lines += ["", *[re.sub(r"^( *)", r"\1- ", line) for line in [legend(comp, "bold"), *notes(comp)]]]
    return "\n".join(lines) + "\n"


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
    """The sweep dict of a local Optuna study (out_dir/sweeps/<sweep>/optuna.db); {} if there is none."""
    path = Path(out_dir) / "sweeps" / str(sweep) / "optuna.db"
    if sweep is None or not path.is_file():
        return {}
    import optuna

    try:
        study = optuna.load_study(study_name=sweep, storage=f"sqlite:///{path.resolve()}")
    except KeyError:
        return {}
    return study.user_attrs.get("sweep") or {}


def default_rows(spec: dict) -> str:
    """encoding, plus the parameters a sweep varies (seed, encoding and task aside): one row per setting."""
    fixed = {"seed_everything", "data.task", "data.init_args.task"}
    encodings = ("encoding", "encoder_encoding", "decoder_encoding")  # all three are in a run's `encoding`
    fixed |= {f"model.{e}" for e in encodings} | {f"model.init_args.{e}" for e in encodings}
    varied = [k for k, v in (spec.get("parameters") or {}).items() if k not in fixed and "value" not in dict(v)]
    return ",".join(["encoding", *varied])


def output(comp: Comparison, fmt_name: str, console: Console | None = None) -> None:
    if fmt_name == "table":
        (console or Console()).print(render_table(comp))
    else:
        print({"csv": to_csv, "json": to_json, "markdown": to_markdown}[fmt_name](comp), end="")


def run_compare(opts: CompareOptions) -> Comparison:
    """Read, aggregate and print; write the report when asked."""
    if opts.format not in FORMATS:
        raise ConfigError(f"--format {opts.format!r}; choose one of: {', '.join(FORMATS)}")
    if opts.wandb:
        records = select(read_wandb(opts.wandb), opts.sweep, f"in W&B project {opts.wandb!r}")
    else:
        records = read_records(opts.out_dir, opts.sweep)
    spec = sweep_spec(opts.out_dir, opts.sweep)
    metrics = objectives(spec, opts.metric)
    comps = [compare(records, m, opts.value, opts.rows or default_rows(spec), opts.cols) for m, _ in metrics]
    for comp in comps:
        output(comp, opts.format)
    if opts.format == "table":
        print_front(comps, [d for _, d in metrics], Console())
    comp = comps[0]
    if opts.report:
        from tracking.compare_report import write_report

        page = write_report(comp, Path(opts.report))
        print(f"report: {page}", file=sys.stderr)
    return comp


def compare_main(args: list[str]) -> Comparison:
    """`cli.py compare [--out_dir DIR] [--sweep NAME] [--metric M] [--format F] [--report DIR] ...`"""
    from jsonargparse import CLI

    return run_compare(CLI(CompareOptions, args=args))


def print_comparison(
    out_dir: str = "out", sweep: str | None = None, metric: str | list[str] | None = None, console=None
) -> None:
    """Print the comparison table of a sweep's runs (called at the end of `cli.py sweep`), one per
    objective and the Pareto front when there are several; a problem such as no finished run yet is one
    line, never an exception."""
    console = console or Console()
    try:
        records = read_records(out_dir, sweep)
        spec = sweep_spec(out_dir, sweep)
        metrics = objectives(spec, ",".join(metric) if isinstance(metric, list) else metric)
        comps = [compare(records, m, rows=default_rows(spec)) for m, _ in metrics]
    except ConfigError as error:
        console.print(f"compare: {error}")
        return
    for comp in comps:
        console.print(render_table(comp))
    print_front(comps, [d for _, d in metrics], console)


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
