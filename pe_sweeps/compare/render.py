"""The five formats of `cli.py compare`: a rich table (to the console), csv, json, markdown and a LaTeX
booktabs table (to stdout); the lines under the table are compare/legend.py, the report's plots compare/report.py."""

import csv
import io
import json
import math
import re
import sys

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from pe_sweeps.compare.across_tasks import IQM_INTERVAL
from pe_sweeps.compare.categories import category_dict, category_grid, category_title
from pe_sweeps.compare.comparison import CLIPPED, LEVEL, Comparison, cell_text
from pe_sweeps.compare.legend import (
    exclusion_lines,
    interval_line,
    methodology,
    precondition_line,
    short_legend,
    tests_line,
    verdict_line,
)
from pe_sweeps.compare.preconditions import MARK
from pe_sweeps.compare.statistics import compare, log_scale

FORMATS = ("table", "csv", "json", "markdown", "latex")


def as_list(comps) -> list[Comparison]:
    return [comps] if isinstance(comps, Comparison) else list(comps)


def grid_of(comps, compact: bool = False) -> tuple[list[str], list[tuple[str, list[tuple[str, bool]], list[str]]]]:
    """Header and rows shared by the table and markdown: one column per (column, metric), then per metric the
    mean rank and mean reciprocal rank where it has them (2 columns or more, `statistics.aggregate_rows`). Rows
    follow the first metric's mean rank. `compact`: cells as `center [low, high]` (comparison.cell_text)."""
    comps = as_list(comps)
    many = len(comps) > 1
    ranked = [comp for comp in comps if comp.mean_rank]
    header = [", ".join(comps[0].row_keys)]
    header += [f"{c} {comp.metric}" if many else c for comp in comps for c in comp.cols]
    header += [f"{k} {comp.metric}" if many else k for comp in ranked for k in ("mean rank", "MRR")]
    rows = list(dict.fromkeys(r for comp in comps for r in comp.rows))
    out = []
    for row in rows:
        texts = [
            (cell_text(comp.cells[row, c], comp.ranks.get((row, c)), False, compact), comp.is_best(row, c))
            if (row, c) in comp.cells else ("-", False)
            for comp in comps for c in comp.cols
        ]  # fmt: skip
        ranks = [f"{comp.mean_rank[row]:.2f}" if row in comp.mean_rank else "-" for comp in ranked]
        mrr = [f"{comp.mrr[row]:.2f}" if row in comp.mrr else "-" for comp in ranked]
        out.append((row, texts, [x for pair in zip(ranks, mrr) for x in pair]))
    return header, out


def footer(comps, best: str = "*", per_seed: bool = False, compact: bool = False, explain: bool = False) -> list[str]:
    """The lines under a table: the short legend (compare/legend.py), or with `explain` the full methodology."""
    return (methodology if explain else short_legend)(as_list(comps), best, compact, per_seed)


def columns_of(header: list[str], rows: list) -> list[list[str]]:
    """Each column's texts as the table shows them (header first; a best cell with its "* " mark)."""
    columns = [[name_] for name_ in header]
    for row, texts, ranks in rows:
        for column, text in zip(columns, [row, *(("* " if best else "") + t for t, best in texts), *ranks]):
            column.append(text)
    return columns


def fits(header: list[str], rows: list, width: int) -> bool:
    """Whether a table of these cells fits `width` columns with each cell on one line (borders included)."""
    return sum(max(map(len, column)) + 3 for column in columns_of(header, rows)) + 1 <= width


def longest_words(header: list[str], rows: list) -> list[int]:
    """Each column's longest word, header included: its narrowest width that splits no number or name (1 for a
    column with no words, e.g. every run excluded or a row value "")."""
    return [max((len(word) for text in column for word in text.split()), default=1)
            for column in columns_of(header, rows)]  # fmt: skip


def fits_wrapped(comps: list[Comparison], width: int) -> bool:
    """Whether the compact table of `comps` fits `width` columns with its cells wrapped between words."""
    return sum(n + 3 for n in longest_words(*grid_of(comps, compact=True))) + 1 <= width


class ComparisonTable:
    """The comparison as a rich renderable that fits the console it is printed on: the metrics side by side in one
    table where that fits between words, else one table a metric under one heading; then the legend (or, with
    `explain`, the full methodology), wrapped between words at the console's width."""

    def __init__(self, comps, per_seed: bool = False, explain: bool = False):
        self.comps, self.per_seed, self.explain = as_list(comps), per_seed, explain

    def __rich_console__(self, console, options):
        width = options.max_width
        groups = [self.comps] if fits_wrapped(self.comps, width) else [[comp] for comp in self.comps]
        compact = any(not fits(*grid_of(group), width) for group in groups)
        if len(groups) > 1:
            yield Text(title_of(self.comps, compact), justify="center")
        for group in groups:
            yield table_for(group, width, compact, title_of(group, compact) if len(groups) == 1 else None)
        yield from category_tables(self.comps)
        for line in footer(self.comps, per_seed=self.per_seed, compact=compact, explain=self.explain):
            yield Text(line)  # plain text: "[...]" is not markup


def render_table(comps, per_seed: bool = False, explain: bool = False) -> ComparisonTable:
    """One or several comparisons (metrics side by side) as a table, then its legend (`ComparisonTable`)."""
    return ComparisonTable(comps, per_seed, explain)


def category_tables(comps: list[Comparison]) -> list[Table]:
    """Under the table: per metric whose columns are tasks of several categories, each row's mean #rank per task
    category (compare/categories.py)."""
    tables = []
    for comp in comps:
        grid = category_grid(comp)
        if grid is None:
            continue
        header, rows = grid
        table = Table(title=category_title(comp))
        for i, name_ in enumerate(header):
            table.add_column(escape(name_), overflow="fold", justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*map(escape, row))
        tables.append(table)
    return tables


def category_markdown(comps: list[Comparison]) -> list[str]:
    """The per-category mean-rank tables as markdown, each after a blank line and its title."""
    lines = []
    for comp in comps:
        grid = category_grid(comp)
        if grid is not None:
            header, rows = grid
            lines += ["", category_title(comp), "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def title_of(comps: list[Comparison], compact: bool) -> str:
    """`final val/acc, val/acc_ood (max/max), mean ± std over seeds`."""
    first = comps[0]
    metrics = ", ".join(c.metric for c in comps)
    spread = "" if compact else " ± std"
    return f"{first.value} {metrics} ({'/'.join(c.goal for c in comps)}), {first.aggregate}{spread} over seeds"


def table_for(comps, width: int, compact: bool, title: str | None = None) -> Table:
    """The rich Table for a console `width` columns wide (titled by its metric when `title` is None). Cells wrap
    only between words, so a number is never split; `compact`: cells as `center [low, high]`."""
    header, rows = grid_of(comps, compact=compact)
    title = title or f"{comps[0].metric} ({comps[0].goal})"
    table = Table(title=title, min_width=min(width, 160))
    for name_, longest in zip(header, longest_words(header, rows)):
        table.add_column(name_, overflow="fold", min_width=min(longest, max(1, width - 4)),
                         justify="right" if "rank" in name_ or "MRR" in name_ else "left")  # fmt: skip
    for row, texts, ranks in rows:
        table.add_row(
            escape(row), *[f"[bold green]* {escape(t)}[/]" if best else escape(t) for t, best in texts], *ranks
        )
    return table


def comparison_table(records: list, metric: str, value: str = "final", rows="encoding", cols="task"):
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
            "ci_level": cell.interval.level if cell.n > 1 or cell.sampling else None,
            "ci_clipped": list(cell.interval.clipped), **sampling_fields(cell),
            "rank": comp.ranks.get((row, col)), "best": comp.is_best(row, col), "mean_rank": comp.mean_rank.get(row),
            "mrr": comp.mrr.get(row), "chosen": cell.chosen, "seeds": [r.seed for r in cell.records],
            "values": cell.values,
            # None without a declared precondition; a failed cell has no rank (compare/preconditions.py)
            "precondition_ok": (row, col) not in comp.failed if comp.preconditions else None,
            "precondition_failed": comp.failed.get((row, col)),
        })  # fmt: skip
    return out


def sampling_fields(cell) -> dict:
    """Which interval a cell has: over seeds and examples (its design, df, examples per run) or seeds only."""
    found = cell.sampling
    if found is None:
        return {"ci_method": "seeds", "ci_design": None, "ci_df": None, "examples": None}
    return {"ci_method": "seeds+examples", "ci_design": found.design, "ci_df": _num(found.df),
            "examples": found.examples}  # fmt: skip


def key_column(keys: list[str], fallback: str, taken: set[str]) -> str:
    """The csv column of a comparison's row or column label: named by its keys (`encoding`, `task`,
    `encoding,model.lr`), else `fallback` where that name is one of the value columns."""
    name = ",".join(keys) or fallback
    return fallback if name in taken else name


def to_csv(comps) -> str:
    """One row per cell, the label columns named by their keys (`encoding`, `task`), lists (seeds, values,
    ci_clipped) as JSON lists: `pandas.read_csv` reads it back, `json.loads` each list cell."""
    buffer = io.StringIO()
    out = []
    for comp in as_list(comps):
        for cell in cell_rows(comp):
            taken = set(cell) - {"row", "col"}
            named = {key_column(comp.row_keys, "row", taken): cell.pop("row")}
            named[key_column(comp.col_keys, "col", taken | set(named))] = cell.pop("col")
            lists = {k: json.dumps(cell[k]) for k in ("seeds", "values", "ci_clipped")}
            out.append({"metric": cell.pop("metric"), **named, **cell, **lists})
    fields = list(dict.fromkeys(key for row in out for key in row)) or ["metric", "row", "col"]
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    writer.writerows(out)
    return buffer.getvalue()


def comparison_dict(comp: Comparison) -> dict:
    return {
        "metric": comp.metric, "value": comp.value, "goal": comp.goal, "aggregate": comp.aggregate,
        "interval": comp.interval, "best_over": comp.best_over, "rows": comp.row_keys, "cols": comp.col_keys,
        "cells": cell_rows(comp), "mean_rank": comp.mean_rank, "mrr": comp.mrr,
        "iqm": {row: dict(zip(("iqm", "ci_low", "ci_high"), v)) for row, v in comp.iqm.items()},
        "iqm_interval": IQM_INTERVAL, "iqm_level": comp.iqm_level, "missing": comp.missing, "kinds": comp.kinds,
        "no_aggregate": comp.no_aggregate, "tests": comp.tests, "protocol": protocol_dict(comp),
        "pairs": {col: [{k: _num(v) if isinstance(v, float) else v for k, v in pair.items()} for pair in pairs]
                  for col, pairs in comp.pairs.items()},
        "ood_selection": comp.ood_selection, "excluded": [vars(e) for e in comp.excluded],
        "precondition": comp.preconditions or None, "precondition_source": comp.precondition_source,
        "precondition_failed_rows": comp.failed_rows, "category_ranks": category_dict(comp),
    }  # fmt: skip


def protocol_dict(comp: Comparison) -> dict | None:
    """What every pair's verdict in the JSON was decided by: test, interval method, alpha, margin, family."""
    protocol = comp.protocol
    if protocol is None:
        return None
    log = log_scale(comp.metric)
    family = "exploratory" if comp.exploratory else ("primary" if protocol.primary else "every pair x column x metric")
    return {
        "test": pair_tests(comp, log),
        "equivalence_test": "two one-sided tests (TOST) against ±margin, with each pair's test's standard error",
        "interval": f"{1 - protocol.alpha:.0%} interval of each pair's test, of the "
        + ("ratio of geometric means (exponentiated from the log scale)" if log else "difference in means (a - b)"),
        "adjustment": "Holm over the family", "alpha": protocol.alpha,
        "margin": protocol.margins.get(comp.metric), "margin_scale": "log" if log else "raw",
        "margin_source": protocol.margin_source, "family": family,
        "family_size": protocol.exploratory if comp.exploratory else protocol.family,
        "primary": protocol.primary,
        "verdicts": ["better", "worse", "equivalent", "inconclusive", "not testable", "precondition failed"],
    }  # fmt: skip


def pair_tests(comp: Comparison, log: bool) -> str:
    """The tests of a comparison's pairs (each pair's `test` names its own)."""
    sampled = "t-test over seeds and evaluation examples (a seed term and, on a shared cut, an examples term, each "
    sampled += "with its own t quantile; paired by seed and example where the rows share them): "
    sampled += "compare/evaluation_sampling.py"
    welch = "Welch's t-test over seeds (scipy.stats.ttest_ind, equal_var=False)" + (" on log values" * log)
    used = {p.get("test", "").split(" (")[0] for pairs in comp.pairs.values() for p in pairs}
    names = [sampled] * any(t.startswith("t-test over seeds and") for t in used)
    names += [welch] * (any(t.startswith("Welch") for t in used) or not names)
    return "; for the pairs without per-example outcomes: ".join(names)


def to_json(comps) -> str:
    """One metric: its comparison; several: {"comparisons": [one per metric]}."""
    comps = as_list(comps)
    data = comparison_dict(comps[0]) if len(comps) == 1 else {"comparisons": [comparison_dict(c) for c in comps]}
    return json.dumps(data, indent=1)


def to_markdown(comps, per_seed: bool = False, explain: bool = False) -> str:
    """The table, then its short legend as a list (with `explain`, the full methodology)."""
    header, rows = grid_of(comps)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, texts, ranks in rows:
        lines.append("| " + " | ".join([row, *[f"**{t}**" if best else t for t, best in texts], *ranks]) + " |")
    lines += category_markdown(as_list(comps))
    lines += ["", *[re.sub(r"^( *)", r"\1- ", line) for line in footer(comps, "bold", per_seed, explain=explain)]]
    return "\n".join(lines) + "\n"


LATEX_ESCAPES = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "±": r"$\pm$",
                 "†": r"$^\dagger$", MARK: r"$\times$"}  # fmt: skip


def latex_escape(text: str) -> str:
    return "".join(LATEX_ESCAPES.get(ch, ch) for ch in text)


def column_decimals(comp: Comparison, col: str) -> int:
    """One number format per column: the most decimals any of its cells' intervals justify (two significant
    digits of the interval's width, `Cell.decimals`); three significant digits of its largest value when no
    cell has an interval (one seed each)."""
    cells = [comp.cells[r, col] for r in comp.rows if (r, col) in comp.cells]
    justified = [c.decimals for c in cells if c.decimals is not None]
    if justified:
        return max(justified)
    largest = max((abs(c.center) for c in cells), default=0.0) or 1.0
    return max(0, 2 - math.floor(math.log10(largest)))


def latex_cell(comp: Comparison, row: str, col: str, decimals: int, interval: bool) -> str:
    """`center` (bold when best in its column), `center [low, high]` with the interval; `-` for no cell."""
    if (row, col) not in comp.cells:
        return "-"
    cell = comp.cells[row, col]
    text = f"{cell.center:.{decimals}f}"
    if interval and cell.n > 1:
        low, high = (f"{x:.{decimals}f}" + (CLIPPED if c else "") for x, c in zip(cell.ci, cell.interval.clipped))
        text += f" [{low}, {high}]" + ("" if cell.interval.level == LEVEL else f" {cell.interval.level:.0%}")
    text = latex_escape(text + (f" {MARK}" if (row, col) in comp.failed else ""))
    return r"\textbf{" + text + "}" if comp.is_best(row, col) else text


def rank_format(comp: Comparison, col: str) -> str:
    """Ranks as integers, or to one decimal in a column with a tie (2.5)."""
    ranks = [comp.ranks[r, col] for r in comp.rows if (r, col) in comp.ranks]
    return ".0f" if all(float(k).is_integer() for k in ranks) else ".1f"


def latex_caption(comps: list[Comparison], interval: bool) -> str:
    """What a reader needs beside the numbers, the float's only text: the aggregate, n (runs per cell), the marks,
    the interval, the test with its family and alpha, and per column the verdict of its best row against the
    runner-up (`--explain` and `--format json` hold the rest)."""
    first = comps[0]
    ns = sorted({cell.n for comp in comps for cell in comp.cells.values()}) or [0]
    n = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]} to {ns[-1]}"
    goals = ", ".join(f"{c.metric} ({'higher' if c.goal == 'max' else 'lower'} is better)" for c in comps)
    where = "in brackets" if interval else "in the report's error bars"
    marks = "".join(f"; {line}" for comp in comps for line in dict.fromkeys(precondition_line(comp)))
    text = (f"{first.value.capitalize()} {goals}: {first.aggregate} over {n} runs (seeds) per cell; best per column "
            f"in bold{marks}. Intervals ({where}): {interval_line(comps).removeprefix('interval: ')}.")  # fmt: skip
    tests_ = tests_line(comps, paper=True)
    verdicts = [line for comp in comps for col in comp.cols if (line := verdict_line(comp, col, len(comps) > 1))]
    if tests_ and verdicts:
        text += f" Tests: {tests_.removeprefix('tests: ')}: {'; '.join(verdicts)}."
    return text


def to_latex(comps, per_seed: bool = False, interval: bool = False, rank: bool = False) -> str:
    """A booktabs float (needs \\usepackage{booktabs}): the tabular and its caption only (`latex_caption`; the
    exclusions go to stderr, `output`). Per (metric, column) the aggregate to one number format
    (`column_decimals`), `interval` adds each cell's interval, `rank` a rank column beside each; per metric the
    mean rank and MRR where defined; best cells bold. `per_seed`: the values go to stderr too."""
    comps = as_list(comps)
    many = len(comps) > 1
    columns = [(comp, col) for comp in comps for col in comp.cols]
    ranked = [comp for comp in comps if comp.mean_rank]
    header = [", ".join(comps[0].row_keys)]
    for comp, col in columns:
        header += [f"{col} {comp.metric}" if many else col] + (["rank"] if rank else [])
    header += [f"{k} {comp.metric}" if many else k for comp in ranked for k in ("mean rank", "MRR")]
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             r"\caption{" + latex_escape(latex_caption(comps, interval)) + "}", r"\label{tab:compare}",
             r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}", r"\toprule",
             " & ".join(map(latex_escape, header)) + r" \\", r"\midrule"]  # fmt: skip
    decimals = {(id(comp), col): column_decimals(comp, col) for comp, col in columns}
    ranks = {(id(comp), col): rank_format(comp, col) for comp, col in columns}
    for row in dict.fromkeys(r for comp in comps for r in comp.rows):
        texts = [latex_escape(row)]
        for comp, col in columns:
            texts.append(latex_cell(comp, row, col, decimals[id(comp), col], interval))
            if rank:
                texts.append(f"{comp.ranks[row, col]:{ranks[id(comp), col]}}" if (row, col) in comp.ranks else "-")
        for comp in ranked:
            texts += [f"{getattr(comp, k)[row]:.2f}" if row in getattr(comp, k) else "-" for k in ("mean_rank", "mrr")]
        lines.append(" & ".join(texts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def latex_notes(comps, per_seed: bool = False, explain: bool = False) -> list[str]:
    """What `--format latex` says beside its float, on stderr: the exclusions and selection warnings (with
    `explain`, the full methodology; with `per_seed`, the values)."""
    comps = as_list(comps)
    if explain:
        return methodology(comps, "bold", per_seed=per_seed)
    lines = [f"selected on a beyond-training-length metric: {c.ood_selection}" for c in comps if c.ood_selection]
    lines += exclusion_lines(comps)
    return lines + ([line for line in methodology(comps, per_seed=True) if "(seed " in line] if per_seed else [])


def output(
    comps, fmt_name: str, console: Console | None = None, per_seed: bool = False, interval=False, rank=False,
    explain: bool = False,
) -> None:  # fmt: skip
    """Print the comparison in a format; `interval` and `rank` are LaTeX's optional columns; `explain`: the full
    methodology in place of the short legend (table, markdown; LaTeX: on stderr)."""
    if fmt_name == "table":
        (console or Console()).print(render_table(comps, per_seed, explain))
    elif fmt_name == "latex":
        print(to_latex(comps, per_seed, interval=interval, rank=rank), end="")
        for line in latex_notes(comps, per_seed, explain):
            print(line, file=sys.stderr)
    elif fmt_name == "markdown":
        print(to_markdown(comps, per_seed, explain), end="")
    else:
        print({"csv": to_csv, "json": to_json}[fmt_name](comps), end="")


def print_front(comps: list[Comparison], directions: list[str], console: Console) -> None:
    """The Pareto front beside the per-metric tables (several objectives only)."""
    if len(comps) > 1:
        from pe_sweeps.compare.pareto import front_table

        console.print(front_table(comps, directions))
