"""The five formats of `cli.py compare`: a rich table (to the console), csv, json, markdown and a LaTeX
booktabs table (to stdout); the report's plots are tracking/compare_report.py."""

import csv
import io
import json
import math
import re

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pe_sweeps.tracking.across_tasks import IQM_INTERVAL
from pe_sweeps.tracking.compare_statistics import compare
from pe_sweeps.tracking.comparison import Comparison, cell_text, legend, notes, seed_lines

FORMATS = ("table", "csv", "json", "markdown", "latex")


def as_list(comps) -> list[Comparison]:
    return [comps] if isinstance(comps, Comparison) else list(comps)


def grid_of(comps, compact: bool = False) -> tuple[list[str], list[tuple[str, list[tuple[str, bool]], list[str]]]]:
    """Header and rows shared by the table, markdown and LaTeX: one column per (column, metric), then per
    metric the mean rank and mean reciprocal rank. Rows follow the first metric's mean rank. `compact`: cells
    as `center [low, high]` (comparison.cell_text)."""
    comps = as_list(comps)
    many = len(comps) > 1
    header = [", ".join(comps[0].row_keys)]
    header += [f"{c} {comp.metric}" if many else c for comp in comps for c in comp.cols]
    header += [f"{k} {comp.metric}" if many else k for comp in comps for k in ("mean rank", "MRR")]
    rows = list(dict.fromkeys(r for comp in comps for r in comp.rows))
    out = []
    for row in rows:
        texts = [
            (cell_text(comp.cells[row, c], comp.ranks[row, c], False, compact), comp.is_best(row, c))
            if (row, c) in comp.cells else ("-", False)
            for comp in comps for c in comp.cols
        ]  # fmt: skip
        ranks = [f"{comp.mean_rank[row]:.2f}" if row in comp.mean_rank else "-" for comp in comps]
        mrr = [f"{comp.mrr[row]:.2f}" if row in comp.mrr else "-" for comp in comps]
        out.append((row, texts, [x for pair in zip(ranks, mrr) for x in pair]))
    return header, out


def footer(comps, best: str = "*", per_seed: bool = False, compact: bool = False) -> list[str]:
    lines = [line for comp in as_list(comps) for line in [legend(comp, best, compact), *notes(comp)]]
    return lines + ([line for comp in as_list(comps) for line in seed_lines(comp)] if per_seed else [])


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


class ComparisonTable:
    """The comparison as a rich renderable that fits the console it is printed on (`table_for`)."""

    def __init__(self, comps, per_seed: bool = False):
        self.comps, self.per_seed = as_list(comps), per_seed

    def __rich_console__(self, console, options):
        yield table_for(self.comps, self.per_seed, options.max_width)


def render_table(comps, per_seed: bool = False) -> ComparisonTable:
    """One or several comparisons (metrics side by side) as a table, tests and exclusions as its caption."""
    return ComparisonTable(comps, per_seed)


def table_for(comps, per_seed: bool, width: int) -> Table:
    """The rich Table for a console `width` columns wide. Cells wrap only between words, so a number is never
    split; when the full cells do not fit on one line each, they are compact (`center [low, high]`), as the
    caption says."""
    first = comps[0]
    header, rows = grid_of(comps)
    compact = not fits(header, rows, width)
    if compact:
        header, rows = grid_of(comps, compact=True)
    metrics = ", ".join(c.metric for c in comps)
    spread = "" if compact else " ± std"
    title = f"{first.value} {metrics} ({'/'.join(c.goal for c in comps)}), {first.aggregate}{spread} over seeds"
    caption = [escape(line) for line in footer(comps, per_seed=per_seed, compact=compact)]  # "[...]": text
    table = Table(title=title, caption="\n".join(caption), caption_justify="left", min_width=min(width, 160))
    for name_, column in zip(header, columns_of(header, rows)):
        # the longest word of a column is its minimum width: rich wraps at spaces, never inside a number
        longest = max(len(word) for text in column[1:] for word in text.split())
        table.add_column(name_, overflow="fold", min_width=longest,
                         justify="right" if "rank" in name_ or "MRR" in name_ else "left")  # fmt: skip
    for row, texts, ranks in rows:
        table.add_row(
            escape(row), *[f"[bold green]* {escape(t)}[/]" if best else escape(t) for t, best in texts], *ranks
        )
    return table


def comparison_table(records: list, metric: str, value: str = "final", rows="encoding", cols="task") -> Table:
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
            "mrr": comp.mrr.get(row), "chosen": cell.chosen, "seeds": [r.seed for r in cell.records],
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


def output(comps, fmt_name: str, console: Console | None = None, per_seed: bool = False) -> None:
    if fmt_name == "table":
        (console or Console()).print(render_table(comps, per_seed))
    elif fmt_name in ("markdown", "latex"):
        print({"markdown": to_markdown, "latex": to_latex}[fmt_name](comps, per_seed), end="")
    else:
        print({"csv": to_csv, "json": to_json}[fmt_name](comps), end="")


def print_front(comps: list[Comparison], directions: list[str], console: Console) -> None:
    """The Pareto front beside the per-metric tables (several objectives only)."""
    if len(comps) > 1:
        from pe_sweeps.tracking.pareto import front_table

        console.print(front_table(comps, directions))
