"""The statistics of `cli.py compare`: per column ranks, per row mean rank, MRR (Kazemnejad et al. 2023)
and IQM (rliable, Agarwal et al. 2021), Welch t-tests Holm-adjusted over the pairs of a column (Holm
1979); `compare` builds a Comparison (compare/comparison.py) from run records."""

import itertools
import math
import warnings
from collections import defaultdict

import numpy as np
from scipy import stats

from lightning_modules.metric_names import goal
from pe_core.errors import ConfigError
from pe_sweeps.compare.across_tasks import iqm_interval
from pe_sweeps.compare.comparison import Cell, Comparison, cell_number, lookup
from pe_sweeps.compare.selection import (
    check_best_over,
    check_columns,
    check_metric,
    group_cells,
    keys_of,
    known_value,
    pick_best_over,
)
from pe_sweeps.runs.records import RunRecord

VALUES = ("final", "best", "step=N")  # step=N: the validation at global step N
AGGREGATES = ("mean", "median")
ALPHA = 0.05


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
    records: list[RunRecord], metric: str, value: str = "final", rows="encoding", cols="task", aggregate: str = "mean",
    best_over: str | None = None, chosen: dict | None = None, direction: str | None = None, tuned=(),
) -> Comparison:  # fmt: skip
    """Aggregate records into a Comparison: cells over seeds, ranks, mean ranks, tests, exclusions.
    `chosen` ({(row, col): value}) fixes the --best-over choice (made on another metric); `direction`
    (maximize/minimize, the sweep file's goal) overrides the goal read from the metric's name; `tuned`: keys
    the rows of a column may differ in besides the row keys (the parameters a sweep tunes)."""
    if not known_value(value):
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
    records: list[RunRecord], metrics: list[str], goals: list[str | None] | None = None, **kwargs
) -> list["Comparison"]:
    """One Comparison per metric; a --best-over choice is made on the first metric and kept for the rest
    (so, e.g., a learning rate is never chosen on a beyond-length metric listed second). `goals`: per
    metric, the sweep file's direction (maximize/minimize) or None (goal by the metric's name)."""
    goals = list(goals or [None] * len(metrics))
    first = compare(records, metrics[0], direction=goals[0], **kwargs)
    chosen = {key: cell.chosen for key, cell in first.cells.items()} if kwargs.get("best_over") else None
    return [first] + [compare(records, m, chosen=chosen, direction=d, **kwargs) for m, d in zip(metrics[1:], goals[1:])]
