"""Per-category mean ranks of a comparison whose columns are synthetic tasks (issue 49.3): each row's mean #rank over
the ranked columns of each task category (datamodules/tasks `task_category`: Delétang et al. 2023's regular /
context-free / context-sensitive, Kazemnejad et al. 2023's arithmetic and retrieval, ...), with how many columns
it counts, and the columns grouped by category for the atlas heatmap (compare/atlas_figure.py)."""

import numpy as np

from datamodules.tasks import CATEGORIES, TASKS, task_category
from pe_sweeps.compare.comparison import Comparison

TASK_KEY = "task"


def column_categories(comp: Comparison) -> dict[str, str]:
    """{column: its task's category} when the columns are registered synthetic tasks (`--cols task`); else {}."""
    if comp.col_keys != [TASK_KEY] or not comp.cols or any(col not in TASKS for col in comp.cols):
        return {}
    return {col: task_category(col) for col in comp.cols}


def grouped_columns(comp: Comparison) -> list[tuple[str | None, list[str]]]:
    """[(category, its columns)] in CATEGORIES' order, the columns sorted by name within each; one group named
    None holding every column when the columns have no categories."""
    categories = column_categories(comp)
    if not categories:
        return [(None, list(comp.cols))]
    groups = [(c, sorted(col for col, cat in categories.items() if cat == c)) for c in CATEGORIES]
    return [(category, cols) for category, cols in groups if cols]


def category_ranks(comp: Comparison) -> dict[str, dict[str, tuple[float, int]]]:
    """{row: {category: (mean of the row's #rank over that category's columns where it is ranked, how many)}}:
    the column ranks of the table (`comp.ranks`, a cell failing its precondition has none, so it is not counted),
    over the columns' task categories. Empty unless the columns are tasks of two categories or more (over one,
    this is the row's mean #rank) and there are two rows or more of one kind of run."""
    categories = column_categories(comp)
    if len(set(categories.values())) < 2 or len(comp.rows) < 2 or comp.no_aggregate:
        return {}
    out = {}
    for row in comp.rows:
        mine = {}
        for category, cols in grouped_columns(comp):
            ranks = [comp.ranks[row, col] for col in cols if (row, col) in comp.ranks]
            if ranks:
                mine[category] = (float(np.mean(ranks)), len(ranks))
        out[row] = mine
    return out


def category_grid(comp: Comparison) -> tuple[list[str], list[list[str]]] | None:
    """(header, rows) of the per-category mean-rank table: `2.33 (3)` is a mean #rank over 3 ranked tasks, `-` a
    category where the row has no ranked task; None where there are no category ranks."""
    ranks = category_ranks(comp)
    if not ranks:
        return None
    groups = grouped_columns(comp)
    header = [", ".join(comp.row_keys)] + [
        f"{category} ({len(cols)} task{'s' * (len(cols) != 1)})" for category, cols in groups
    ]
    rows = []
    for row in comp.rows:
        cells = [ranks[row].get(category) for category, _ in groups]
        rows.append([row] + ["-" if c is None else f"{c[0]:.2f} ({c[1]})" for c in cells])
    return header, rows


def category_title(comp: Comparison) -> str:
    """What the per-category table holds, said above it."""
    return (f"{comp.metric}: mean #rank per task category (the table's column ranks, 1 = best; (k): the row's ranked "
            "tasks in that category, a cell failing its precondition has no rank)")  # fmt: skip


def category_dict(comp: Comparison) -> dict:
    """`category_ranks` for --format json: {row: {category: {mean_rank, tasks}}} and each column's category."""
    ranks = category_ranks(comp)
    if not ranks:
        return {}
    return {
        "categories": column_categories(comp),
        "ranks": {row: {c: {"mean_rank": m, "tasks": n} for c, (m, n) in cats.items()} for row, cats in ranks.items()},
    }
