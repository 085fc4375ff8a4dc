"""The statistics of `cli.py compare`: per column ranks, per row mean rank, MRR (Kazemnejad et al. 2023)
and IQM (rliable, Agarwal et al. 2021); per pair of rows in a column a verdict under a declared protocol
(`judge`): Welch t-tests (on log values for perplexity) Holm-adjusted (Holm 1979) over one family, every
pair x column x metric shown (or the --primary metric's, the rest exploratory): better / worse at alpha,
equivalent within a declared margin by two one-sided tests (TOST), else inconclusive. `compare` builds a
Comparison (compare/comparison.py) from run records."""

import itertools
import math
import warnings
from collections import Counter, defaultdict

import numpy as np
from scipy import stats

from lightning_modules.metric_names import goal
from pe_core.errors import ConfigError
from pe_sweeps.compare.across_tasks import MIN_IQM_COLUMNS, iqm_coverage, iqm_interval
from pe_sweeps.compare.comparison import Cell, Comparison, Protocol, cell_number, lookup
from pe_sweeps.compare.evaluation_sampling import cell_estimate, pair_estimate, run_outcomes
from pe_sweeps.compare.preconditions import Precondition, failures
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
INTERVALS = ("seeds+examples", "seeds")  # --interval: with the evaluation set's sampling (default), or seeds only
SAMPLED_TEST = "t-test over seeds and examples"
SEEDS_TEST = "Welch t-test over seeds"


def column_ranks(comp: Comparison, col: str, rows: list[str]) -> dict[str, float]:
    """Ranks of `rows` in a column by their aggregate (1 = best by the goal, ties averaged)."""
    sign = -1.0 if comp.goal == "max" else 1.0
    return dict(zip(rows, map(float, stats.rankdata([sign * comp.cells[r, col].center for r in rows]))))


def rank_columns(comp: Comparison) -> None:
    """Rank the rows of each column (the #rank of each cell), then the across-column aggregates."""
    for col in comp.cols:  # a cell failing its precondition has no rank
        rows = [r for r in comp.rows if (r, col) in comp.cells and (r, col) not in comp.failed]
        ranks = column_ranks(comp, col, rows)
        comp.ranks.update({(r, col): k for r, k in ranks.items()})
    aggregate_rows(comp)


def kind_of(comp: Comparison, col: str) -> str:
    """A column's kind of run: the class of its task module (synthetic, causal LM, masked LM, classifier...)."""
    records = [r for (_, c), cell in comp.cells.items() if c == col for r in cell.records]
    return "+".join(sorted({str(lookup(r, "model.class_path")).rsplit(".", 1)[-1] for r in records}))


def aggregate_rows(comp: Comparison) -> None:
    """Mean rank, mean reciprocal rank (Kazemnejad et al. 2023) and, from MIN_IQM_COLUMNS columns, IQM with its
    stratified-bootstrap interval (rliable, Agarwal et al. 2021) per row, over every column; none over one column
    (the mean rank would be its rank) or for fewer than two rows. Only over columns of one kind of run (the
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
    comp.failed_rows = {r: [c for c in comp.cols if (r, c) in comp.failed] for r in comp.rows}
    comp.failed_rows = {r: cols for r, cols in comp.failed_rows.items() if cols}
    complete = [r for r in comp.rows if r not in comp.missing and r not in comp.failed_rows]
    if len(complete) < 2 or len(comp.cols) < 2:  # over one column: its rank; of one row: nothing to compare
        return
    ranks = [column_ranks(comp, col, complete) for col in comp.cols]
    for row in complete:
        mine = [by_row[row] for by_row in ranks]
        comp.mean_rank[row] = float(np.mean(mine))
        comp.mrr[row] = float(np.mean([1.0 / k for k in mine]))
        if len(comp.cols) >= MIN_IQM_COLUMNS:  # across_tasks.MIN_IQM_COLUMNS: why not over fewer
            comp.iqm[row] = iqm_interval([comp.cells[row, col].values for col in comp.cols])
            comp.iqm_level[row] = iqm_coverage(tuple(sorted(comp.cells[row, col].n for col in comp.cols)))


def holm(pvalues) -> list[float]:
    """Holm's step-down adjustment (Holm 1979): the i-th smallest of m p-values times (m - i + 1),
    made monotone and capped at 1; returned in the input order."""
    return holm_array(np.asarray(pvalues, dtype=float)).tolist()


def holm_array(pvalues: np.ndarray) -> np.ndarray:
    """`holm` over the last axis of an array (one family per row): a simulation adjusts all its draws at once."""
    m = pvalues.shape[-1]
    order = np.argsort(pvalues, axis=-1, kind="stable")
    ranked = np.take_along_axis(pvalues, order, axis=-1) * (m - np.arange(m))
    adjusted = np.minimum(1.0, np.maximum.accumulate(ranked, axis=-1))
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def log_scale(metric: str) -> bool:
    """Perplexities are compared on the log scale (their seeds spread over orders of magnitude beyond the
    training length, where a raw-scale t-test drowns a 30-fold gap in one seed's tail)."""
    short = metric.rsplit("/", 1)[-1].lower()
    return "ppl" in short or "perplexity" in short


def tested_values(cell: Cell, log: bool) -> np.ndarray | None:
    """A cell's values on its test's scale; None when they have no log (a value <= 0)."""
    values = np.asarray(cell.values, dtype=float)
    if not log:
        return values
    return np.log(values) if (values > 0).all() else None


def welch(a: np.ndarray, b: np.ndarray, alternative: str = "two-sided", alpha: float = ALPHA):
    """scipy's Welch t-test (unequal variances), warnings of degenerate samples silenced (their p is NaN)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return stats.ttest_ind(a, b, equal_var=False, alternative=alternative)


UNTESTED = {"p": math.nan, "p_equivalence": None, "difference": None, "ci_low": None, "ci_high": None}


def sampled_pair_test(a: Cell, b: Cell, margin: float | None, alpha: float = ALPHA) -> dict | None:
    """The test of a against b over seeds AND evaluation examples (compare/evaluation_sampling.py), paired by seed
    and example where the rows share them; None when either cell lacks per-example outcomes or the design is not
    covered (then `pair_test` falls back to Welch over seeds)."""
    if a.outcomes is None or b.outcomes is None:
        return None
    found = pair_estimate(a.outcomes, b.outcomes, [r.seed for r in a.records], [r.seed for r in b.records])
    if found is None:
        return None
    low, high = found.interval(1 - alpha)
    out = {"p": found.p_value(), "difference": found.estimate, "ci_low": low, "ci_high": high,
           "test": f"{SAMPLED_TEST} ({found.design}, df {found.df:.3g})", "p_equivalence": None}  # fmt: skip
    if margin is not None:
        out["p_equivalence"] = found.p_equivalence(margin)
    return out


def pair_test(a: Cell, b: Cell, log: bool, margin: float | None, alpha: float = ALPHA) -> dict:
    """Welch's t-test of a against b (raw p), the (1 - alpha) Welch interval of the difference in means
    (a ratio of geometric means on the log scale) and, with a margin, TOST's p: the larger p of the two one-sided
    Welch tests of difference <= -margin and >= +margin (Schuirmann 1987). NaN p: not testable."""
    sampled = None if log else sampled_pair_test(a, b, margin, alpha)
    if sampled is not None:
        return sampled
    out = dict(UNTESTED) | {"test": SEEDS_TEST + (" on log values" if log else "")}
    x, y = tested_values(a, log), tested_values(b, log)
    if a.n < 2 or b.n < 2 or x is None or y is None:
        return out
    result = welch(x, y)
    if math.isnan(result.pvalue):
        return out
    ci = result.confidence_interval(1 - alpha)
    to_raw = math.exp if log else float
    out |= {"p": float(result.pvalue), "difference": to_raw(x.mean() - y.mean()), "ci_low": to_raw(ci.low),
            "ci_high": to_raw(ci.high)}  # fmt: skip
    if margin is not None:
        above = welch(x + margin, y, "greater").pvalue  # H0: difference <= -margin
        below = welch(x - margin, y, "less").pvalue  # H0: difference >= +margin
        out["p_equivalence"] = float(max(above, below))
    return out


def pairwise(comp: Comparison, col: str, margin: float | None = None, alpha: float = ALPHA) -> list[dict]:
    """Every pair of rows in a column (in rank order, a ranked above b) with its tests (`pair_test`); the Holm
    adjustment over the family and the verdict are `judge`'s."""
    ordered = [r for _, r in sorted((comp.ranks[r, col], r) for r in comp.rows if (r, col) in comp.ranks)]
    ordered += sorted(r for r in comp.rows if (r, col) in comp.failed)  # no rank: after the ranked rows
    log = log_scale(comp.metric)
    return [{"a": a, "b": b, "col": col, **pair_test(comp.cells[a, col], comp.cells[b, col], log, margin, alpha)}
            if not {(a, col), (b, col)} & set(comp.failed) else {"a": a, "b": b, "col": col, **UNTESTED,
                                                                 "precondition_failed": True}
            for a, b in itertools.combinations(ordered, 2)]  # fmt: skip


def verdict(pair: dict, goal_: str, alpha: float) -> str:
    """better / worse (a against b: Holm-adjusted p < alpha, in the direction of the difference), equivalent
    (TOST's Holm-adjusted p < alpha), else inconclusive; "not testable" without a p; "precondition failed" for a
    pair with a cell that fails its precondition (no test, outside the family)."""
    if pair.get("precondition_failed"):
        return "precondition failed"
    if math.isnan(pair["p"]):
        return "not testable"
    if pair["p_holm"] < alpha:
        ahead = pair["difference"] > (1.0 if pair["scale"] == "log" else 0.0)
        return "better" if ahead == (goal_ == "max") else "worse"
    if pair.get("p_equivalence_holm") is not None and pair["p_equivalence_holm"] < alpha:
        return "equivalent"
    return "inconclusive"


def judge(
    comps: list[Comparison], margins: dict | None = None, primary: str | None = None, alpha: float = ALPHA,
    source: str | None = None,
) -> None:  # fmt: skip
    """Test every pair x column x metric of `comps` and give each pair its verdict under one declared family:
    Holm over every testable pair of every comparison, or with `primary` over that metric's pairs only (the
    other metrics' are exploratory: Holm over their own family). `margins`: {metric or "*": margin} for the
    equivalence verdict (on the log scale for perplexity), declared in `source`."""
    margins = dict(margins or {})
    names = [c.metric for c in comps]
    if primary is not None and primary not in names:
        raise ConfigError(f"--primary {primary!r} is not a metric shown; choose one of: {', '.join(names)}")
    families = {False: [], True: []}
    for comp in comps:
        comp.exploratory = primary is not None and comp.metric != primary
        margin = margins.get(comp.metric, margins.get("*"))
        comp.pairs = {col: pairwise(comp, col, margin, alpha) for col in comp.cols}
        scale = "log" if log_scale(comp.metric) else "raw"
        for pair in (p for col in comp.cols for p in comp.pairs[col]):
            pair |= {"scale": scale, "margin": margin, "exploratory": comp.exploratory}
            families[comp.exploratory].append(pair)
    for family in families.values():
        tested = [p for p in family if not math.isnan(p["p"])]
        for pair, q in zip(tested, holm([p["p"] for p in tested])):
            pair["p_holm"] = q
        equivalence = [p for p in tested if p["p_equivalence"] is not None]
        for pair, q in zip(equivalence, holm([p["p_equivalence"] for p in equivalence])):
            pair["p_equivalence_holm"] = q
    shown = {c.metric: margins.get(c.metric, margins.get("*")) for c in comps}
    protocol = Protocol(alpha, {m: v for m, v in shown.items() if v is not None}, source,
                        sum(not math.isnan(p["p"]) for p in families[False]), primary,
                        sum(not math.isnan(p["p"]) for p in families[True]))  # fmt: skip
    for comp in comps:
        comp.protocol = protocol
        for pair in (p for col in comp.cols for p in comp.pairs[col]):
            pair["verdict"] = verdict(pair, comp.goal, alpha)
        comp.tests = {col: statement(comp, col) for col in comp.cols}


def verdict_text(pair: dict) -> str:
    """`a better than b`, `a equivalent to b within ±m`, `a vs b: inconclusive`."""
    word = pair["verdict"]
    if word in ("better", "worse"):
        return f"{pair['a']} {word} than {pair['b']}"
    if word == "equivalent":
        return f"{pair['a']} equivalent to {pair['b']} within ±{pair['margin']:g}"
    return f"{pair['a']} vs {pair['b']}: {word}"


def statement(comp: Comparison, col: str) -> str:
    """The verdict of a column's best row against the runner-up, its p-values, and the verdicts of all the column's
    pairs counted (`--format json` lists every pair)."""
    pairs = comp.pairs[col]
    tag = "(exploratory) " if comp.exploratory else ""
    if not pairs:
        return f"{tag}{col}: one row only, nothing to compare"
    failed = sum((r, col) in comp.failed for r in comp.rows)
    if len(pairs) == sum(p.get("precondition_failed", False) for p in pairs):
        return f"{tag}{col}: {failed} row(s) fail the precondition, fewer than two left to compare"
    top = pairs[0]  # best vs runner-up (ranked rows first: both pass the precondition)
    a, b = comp.cells[top["a"], col], comp.cells[top["b"], col]
    head = (f"{tag}{col}: {top['a']} ({cell_number(a.center, a)}) vs runner-up {top['b']} "
            f"({cell_number(b.center, b)}):")  # fmt: skip
    if math.isnan(top["p"]):
        return f"{head} {'n<2' if a.n < 2 or b.n < 2 else 'identical values'}, not testable"
    equivalence = "" if top.get("p_equivalence_holm") is None else f", TOST Holm p={top['p_equivalence_holm']:.2g}"
    counts = Counter(p["verdict"] for p in pairs)
    words = ("better", "worse", "equivalent", "inconclusive", "not testable", "precondition failed")
    tally = ", ".join(f"{counts[w]} {w}" for w in words if counts[w])
    return (f"{head} {top['test']} p={top['p']:.2g}, Holm p={top['p_holm']:.2g}{equivalence}: "
            f"{verdict_text(top)}; the column's {len(pairs)} pairs: {tally}")  # fmt: skip


def attach_outcomes(cells, metric: str, value: str) -> None:
    """Give each cell whose every run kept per-example outcomes of `metric` (reproducing its logged value) those
    outcomes and its interval over seeds and examples (compare/evaluation_sampling.py); the others keep the
    seeds-only interval."""
    for cell in cells:
        found = [run_outcomes(r, metric, value) for r in cell.records]
        if all(f is not None for f in found):
            cell.outcomes = found
            cell.sampling = cell_estimate(found)


def compare(
    records: list[RunRecord], metric: str, value: str = "final", rows="encoding", cols="task", aggregate: str = "mean",
    best_over: str | None = None, chosen: dict | None = None, direction: str | None = None, tuned=(),
    preconditions: list[Precondition] | None = None, interval: str = "seeds+examples", judged: bool = True,
) -> Comparison:  # fmt: skip
    """Aggregate records into a Comparison: cells over seeds, ranks, mean ranks, tests, exclusions.
    `chosen` ({(row, col): value}) fixes the --best-over choice (made on another metric); `direction`
    (maximize/minimize, the sweep file's goal) overrides the goal read from the metric's name; `tuned`: keys
    the rows of a column may differ in besides the row keys (the parameters a sweep tunes); `preconditions`
    (compare/preconditions.py): the cells failing them get no rank, no tested pair and no aggregate; `interval`:
    "seeds+examples" (the evaluation set's sampling too, where the runs kept per-example outcomes) or "seeds";
    `judged` False leaves the pairs' tests to the caller (`compare_metrics` judges all metrics as one family)."""
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
    if interval not in INTERVALS:
        raise ConfigError(f"--interval {interval!r}; choose one of: {', '.join(INTERVALS)}")
    comp.interval_choice = interval
    if interval == "seeds+examples" and aggregate == "mean" and not log_scale(metric):
        attach_outcomes(kept.values(), metric, value)
    if preconditions:
        comp.preconditions = [p.text for p in preconditions]
        args = (value, row_keys, col_keys, aggregate, best_over)
        comp.failed = precondition_failures(records, preconditions, metric, kept, *args)
    comp.rows = sorted({r for r, _ in kept})
    comp.cols = sorted({c for _, c in kept})
    rank_columns(comp)
    order = comp.mean_rank or ({r: comp.ranks[r, c] for (r, c) in comp.ranks} if len(comp.cols) == 1 else {})
    comp.rows.sort(key=lambda r: (order.get(r, math.inf), r))  # one column: by its rank
    if judged:
        judge([comp])
    return comp


def precondition_failures(
    records, preconditions: list[Precondition], metric: str, kept: dict, value, row_keys, col_keys, aggregate, best_over
) -> dict[tuple[str, str], str]:  # fmt: skip
    """{(row, col): why} for the cells of `kept` (of `metric`) failing their preconditions, each judged on the
    same runs' cell of the precondition's metric (with the same --best-over choice)."""
    chosen = {key: cell.chosen for key, cell in kept.items()} if best_over else None
    cache = {metric: kept}

    def cells_of(name: str) -> dict | None:
        if name not in cache:
            cells, _ = group_cells(records, name, value, row_keys, col_keys, aggregate, best_over)
            cache[name] = pick_best_over(cells, goal(name), chosen)[0] if cells else None
        return cache[name]

    return failures(preconditions, sorted(kept), cells_of)


def compare_metrics(
    records: list[RunRecord], metrics: list[str], goals: list[str | None] | None = None, margins: dict | None = None,
    primary: str | None = None, margin_source: str | None = None, precondition_source: str | None = None, **kwargs,
) -> list["Comparison"]:  # fmt: skip
    """One Comparison per metric; a --best-over choice is made on the first metric and kept for the rest
    (so, e.g., a learning rate is never chosen on a beyond-length metric listed second). `goals`: per
    metric, the sweep file's direction (maximize/minimize) or None (goal by the metric's name). The verdicts
    of every pair are judged as one family over all the metrics (`judge`: `margins`, `primary`)."""
    goals = list(goals or [None] * len(metrics))
    first = compare(records, metrics[0], direction=goals[0], judged=False, **kwargs)
    chosen = {key: cell.chosen for key, cell in first.cells.items()} if kwargs.get("best_over") else None
    others = [compare(records, m, chosen=chosen, direction=d, judged=False, **kwargs)
              for m, d in zip(metrics[1:], goals[1:])]  # fmt: skip
    comps = [first, *others]
    for comp in comps:
        comp.precondition_source = precondition_source if comp.preconditions else None
    judge(comps, margins, primary, source=margin_source)
    return comps
