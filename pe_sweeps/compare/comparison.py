"""What a comparison holds and how one cell reads: shared by the formats (compare/render.py) and the
report (compare/report.py), so that neither imports the other."""

import functools
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from lightning_modules.metric_names import bounds, goal
from pe_sweeps.compare.across_tasks import IQM_INTERVAL, MIN_IQM_COLUMNS
from pe_sweeps.compare.coverage import TOLERANCE, mean_level, median_ranks, shown_level, t_interval
from pe_sweeps.compare.preconditions import MARK
from pe_sweeps.runs.records import RunRecord

IDENTITY = ("name", "group", "task", "encoding", "seed", "sweep", "subcommand", "status")
LEVEL = 0.95  # every interval's nominal coverage (compare/coverage.py: the real one, printed when off by > 2 points)
FEW_SEEDS = 5  # below this many seeds a cell's interval is wide by design (the footer says so)
CLIPPED = "†"  # marks an interval's end clipped to the metric's range


def interval_method(aggregate: str, metric: str) -> str:
    """The name of the interval `compare` prints, for the table's footer and the JSON."""
    low, high = bounds(metric)
    clip = f"; clipped to the metric's range [{low:g}, {high:g}] ({CLIPPED} marks a clipped end)"
    clip = "" if math.isinf(low) and math.isinf(high) else clip
    off = f"more than {TOLERANCE:.0%} points from {LEVEL:.0%}".replace("% points", " points")
    if aggregate == "median":
        return (f"{LEVEL:.0%} distribution-free interval of the median over seeds (order statistics, "
                f"scipy.stats.quantile_test); its exact level printed after it where {off} (below n=6 none "
                f"reaches {LEVEL:.0%}: [min, max], n=3: 75%; n=10: 98%){clip}")  # fmt: skip
    return (f"{LEVEL:.0%} Student-t interval of the mean over seeds (scipy.stats.t, n-1 degrees of freedom); its real "
            f"level at the cell's shape (skewed near a bound of the metric's range; simulated, compare/coverage.py) "
            f"printed after it where {off}{clip}")  # fmt: skip


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """(low, high, level): the distribution-free order-statistic interval of the median (a binomial argument,
    scipy.stats.quantile_test's choice of order statistics) and its exact level (coverage.median_ranks): at least
    LEVEL for n >= 6 (n = 10: 97.9 %); below that no pair of order statistics reaches it, and [min, max] is
    returned at 1 - 2^(1-n) (n=3: 75 %)."""
    k, level = median_ranks(len(values))
    ordered = sorted(values)
    return float(ordered[k]), float(ordered[-1 - k]), level


@dataclass
class Interval:
    """A cell's interval: its ends, the coverage it prints (nominal, or its real level when that is more than
    2 points off: compare/coverage.py) and which end was clipped to the metric's range."""

    low: float
    high: float
    level: float = LEVEL
    clipped: tuple[bool, bool] = (False, False)


@dataclass
class Cell:
    """The runs of one (row, column) cell and their statistics over seeds."""

    records: list[dict]
    values: list[float]
    aggregate: str = "mean"
    chosen: str | None = None  # the --best-over value this cell kept
    bounds: tuple[float, float] = (-math.inf, math.inf)  # the metric's range: intervals are clipped to it
    # per run, its per-example values of the metric (compare/evaluation_sampling.py), when every run kept them
    outcomes: list | None = None
    sampling: object | None = None  # an evaluation_sampling.Estimate: the interval over seeds AND examples

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def center(self) -> float:
        """The aggregate over seeds: mean or median."""
        return float(np.median(self.values)) if self.aggregate == "median" else self.mean

    @property
    def std(self) -> float:
        return float(np.std(self.values, ddof=1)) if self.n > 1 else math.nan

    @functools.cached_property
    def interval(self) -> Interval:
        """The interval of the aggregate (NaN for n < 2): Student's t for the mean, order statistics for the
        median (see `interval_method`), clipped to the metric's range. Its level is the nominal one unless the
        real level is more than 2 points off: the median's exact binomial level, or the t interval's coverage at
        the shape the cell's values suggest for a metric of this range (coverage.mean_level). With per-example
        outcomes (`sampling`, compare/evaluation_sampling.py): the t interval over seeds AND evaluation examples,
        even for one seed."""
        if self.sampling is not None:
            low, high = self.sampling.interval(LEVEL)
            floor, ceiling = self.bounds
            return Interval(max(low, floor), min(high, ceiling), LEVEL, (low < floor, high > ceiling))
        if self.n < 2:
            return Interval(math.nan, math.nan)
        if self.aggregate == "median":
            low, high, level = median_interval(self.values)
        else:
            low, high = (float(x) for x in t_interval(self.values))
            level = mean_level(self.values, self.bounds)
        floor, ceiling = self.bounds
        return Interval(max(low, floor), min(high, ceiling), shown_level(level), (low < floor, high > ceiling))

    @property
    def ci(self) -> tuple[float, float]:
        return self.interval.low, self.interval.high

    @property
    def decimals(self) -> int | None:
        """Decimal places the interval justifies (two significant digits of its width); None without one."""
        low, high = self.ci
        width = high - low
        if not math.isfinite(width) or width <= 0:
            return None
        return min(8, max(0, 1 - math.floor(math.log10(width))))


@dataclass
class Excluded:
    """A run left out of the table, and why."""

    row: str
    col: str
    reason: str
    run: str


@dataclass
class Protocol:
    """The declared protocol behind every verdict of a comparison (compare/statistics.py `judge`): the test, its
    level, the equivalence margins and the family its p-values are Holm-adjusted over."""

    alpha: float
    margins: dict[str, float] = field(default_factory=dict)  # metric -> margin (on the log scale for perplexity)
    margin_source: str | None = None  # where the margins were declared: in the sweep file, or with --margin
    family: int = 0  # tests in the (confirmatory) family
    primary: str | None = None  # --primary METRIC: the family is its pairs only, the other metrics exploratory
    exploratory: int = 0  # tests of the exploratory metrics (Holm over their own family)


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
    mrr: dict[str, float] = field(default_factory=dict)  # mean reciprocal rank
    tests: dict[str, str] = field(default_factory=dict)
    pairs: dict[str, list[dict]] = field(default_factory=dict)  # per column: every pair, its p-values and verdict
    protocol: Protocol | None = None  # the test, alpha, margin and family behind the verdicts
    exploratory: bool = False  # not the --primary metric: its verdicts are exploratory
    ood_selection: str | None = None  # why this comparison selects on a beyond-training-length metric (allowed)
    aggregate: str = "mean"
    best_over: str | None = None
    alternatives: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)  # best-over candidates
    declared_goal: str | None = None  # "max"/"min" from the sweep file's metric(s); else by the metric's name
    # across-column aggregates (mean rank, MRR, IQM) cover only the rows with a cell in every column, and only
    # when every column holds one kind of run (see compare/statistics.py `aggregate_rows`)
    missing: dict[str, list[str]] = field(default_factory=dict)  # row -> the columns it lacks (no aggregate)
    kinds: dict[str, str] = field(default_factory=dict)  # column -> its kind of run (the task module's class)
    no_aggregate: str | None = None  # why no across-column aggregate is shown (columns of different kinds)
    iqm: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # row -> (IQM, low, high)
    iqm_level: dict[str, float] = field(default_factory=dict)  # row -> its IQM interval's simulated coverage
    interval_choice: str = "seeds+examples"  # --interval: with the evaluation set's sampling, or "seeds" only
    # declared preconditions (compare/preconditions.py) and the cells failing them: no rank, no tested pair, and
    # their rows (failed_rows: row -> its failed columns) are left out of the across-column aggregates
    preconditions: list[str] = field(default_factory=list)
    precondition_source: str | None = None  # in the sweep file, or with --precondition
    failed: dict[tuple[str, str], str] = field(default_factory=dict)  # (row, col) -> why it fails
    failed_rows: dict[str, list[str]] = field(default_factory=dict)

    @property
    def goal(self) -> str:
        return self.declared_goal or goal(self.metric)

    @property
    def interval(self) -> str:
        """The name of the cells' interval method: over seeds and evaluation examples for the cells whose runs kept
        per-example outcomes, `interval_method` (seeds only) for the others."""
        seeds_only = interval_method(self.aggregate, self.metric)
        sampled = sum(c.sampling is not None for c in self.cells.values())
        if not sampled:
            why = "--interval seeds" if self.interval_choice == "seeds" else "no per-example outcomes"
            return f"{seeds_only} ({why})"
        both = (f"{LEVEL:.0%} t interval over seeds and evaluation examples (a seed term and, on a shared cut, an "
                f"examples term, each with its own t quantile; compare/evaluation_sampling.py)")  # fmt: skip
        if sampled == len(self.cells):
            return both
        return f"{both} in {sampled} of {len(self.cells)} cells; the others (no per-example outcomes): {seeds_only}"

    def is_best(self, row: str, col: str) -> bool:
        rank = self.ranks.get((row, col))  # None: the cell fails its precondition
        return rank is not None and rank == min(self.ranks[r, col] for r in self.rows if (r, col) in self.ranks)


def config_entry(config: dict, key: str) -> tuple[bool, object]:
    """(found, value) of a dotted config path, as written (`model.dim`) or under `init_args`
    (`model.init_args.dim`); found with a null value when the key is there and null, and the first
    non-null of the two paths otherwise."""
    parts = key.split(".")
    found = False
    for path in (parts, parts[:1] + ["init_args"] + parts[1:]):
        node = config
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and path[-1] in node:
            if node[path[-1]] is not None:
                return True, node[path[-1]]
            found = True
    return found, None


def lookup(record: RunRecord, key: str):
    """A record field (`encoding`) or a dotted config path (`model.init_args.dim`, or `model.dim`);
    None when absent. Flat configs (W&B) are looked up by the whole key, then by its last part."""
    if key in IDENTITY or ("." not in key and record.value_of(key) is not None):
        return record.value_of(key)
    config = record.config
    _, value = config_entry(config, key)
    if value is not None:
        return value
    parts = key.split(".")
    return config.get(key, config.get(parts[-1]) if len(parts) > 1 else None)


def is_set(record: RunRecord, key: str) -> bool:
    """Does the run's config hold `key`, null included (`encoding_options: null`, the encoding's defaults)? A
    comparison of several sweeps shows such a run in its own row rather than leaving it out."""
    return lookup(record, key) is not None or config_entry(record.config, key)[0]


def fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.4g}"


def cell_number(x: float, cell: Cell) -> str:
    """A number of this cell to the precision its interval justifies (3 significant digits without one)."""
    if math.isnan(x):
        return "nan"
    decimals = cell.decimals
    return f"{x:.3g}" if decimals is None else f"{x:.{decimals}f}"


def interval_text(cell: Cell) -> str:
    """`[low, high]`, a clipped end marked, the level after it when it is not the nominal one (a median
    of fewer than 6 seeds); empty for one seed (unless its per-example outcomes give one)."""
    if cell.n < 2 and cell.sampling is None:
        return ""
    ci = cell.interval
    low, high = (cell_number(x, cell) + (CLIPPED if clip else "") for x, clip in zip(cell.ci, ci.clipped))
    level = "" if ci.level == LEVEL else f" {ci.level:.0%}"
    return f" [{low}, {high}]{level}"


def cell_text(cell: Cell, rank: float | None, best: bool, compact: bool = False) -> str:
    """`center ± std (n=N) [low, high] #rank`; compact (narrow terminals): `center [low, high]`, or
    `center (n=1)` for a single seed; a cell without a rank (it fails its precondition) is marked instead."""
    if compact:
        mark = f" {MARK}" if rank is None else ""
        return f"{'* ' if best else ''}{cell_number(cell.center, cell)}{interval_text(cell) or ' (n=1)'}{mark}"
    spread = "" if cell.n < 2 else f" ± {cell_number(cell.std, cell)}"
    ci = interval_text(cell)
    chosen = "" if cell.chosen is None else f" @{cell.chosen}"
    ranked = MARK if rank is None else f"#{rank:g}"
    return f"{'* ' if best else ''}{cell_number(cell.center, cell)}{spread} (n={cell.n}){ci} {ranked}{chosen}"


def legend(comp: Comparison, best: str = "*", compact: bool = False) -> str:
    chosen = f"; @value: the {comp.best_over} whose {comp.aggregate} is best in that cell" if comp.best_over else ""
    if compact:
        return (f"{best}: best in column ({comp.goal} of {comp.value} {comp.metric}); compact cells for this "
                f"terminal's width: {comp.aggregate} [{comp.interval}] (a wider terminal, --format csv or json "
                "add std, n and ranks)")  # fmt: skip
    return (
        f"{best}: best in column ({comp.goal} of {comp.value} {comp.metric}); {comp.aggregate} ± std (n) "
        f"[{comp.interval}] #rank in column{chosen}; digits: two significant digits of the interval's width"
    )


def seed_lines(comp: Comparison) -> list[str]:
    """Every cell's per-seed values (`--per_seed`; the csv and json always carry them)."""
    lines = []
    for (row, col), cell in sorted(comp.cells.items()):
        shown = ", ".join(f"{fmt(v)} (seed {r.seed})" for r, v in zip(cell.records, cell.values))
        lines.append(f"{row} / {col} [{comp.metric}]: {shown}")
    return lines


def aggregate_lines(comp: Comparison) -> list[str]:
    """What the across-column aggregates cover: which rows were left out, or why there are none."""
    if comp.no_aggregate:
        return [f"no mean rank, MRR or IQM: {comp.no_aggregate}"]
    lines = []
    if len(comp.cols) < 2:
        lines.append("no mean rank, MRR or IQM: one column (a row's rank is its #rank in it)")
    elif not comp.mean_rank:
        lines.append("no mean rank, MRR or IQM: fewer than two rows with every column, nothing to rank")
    elif not comp.iqm:
        lines.append(f"no IQM: {len(comp.cols)} columns; over fewer than {MIN_IQM_COLUMNS} it is a trimmed mean of a "
                     "handful of runs, its bootstrap far below 95% (compare/across_tasks.py)")  # fmt: skip
    if comp.missing or comp.failed_rows:
        left = [f"{row} (no {', '.join(cols)})" for row, cols in sorted(comp.missing.items())]
        left += [f"{row} (precondition failed in {', '.join(cols)})" for row, cols in sorted(comp.failed_rows.items())]
        passing = " passing its precondition" if comp.preconditions else ""
        lines.append(f"mean rank, MRR and IQM over the rows with every column{passing}; left out: {'; '.join(left)}")
    if comp.iqm:
        levels = set(comp.iqm_level.values())
        one = len(levels) == 1  # every row of one shape: its level said once
        shown = ", ".join(f"{row} {fmt(v)} [{fmt(lo)}, {fmt(hi)}]" + ("" if one else f" {comp.iqm_level[row]:.0%}")
                          for row, (v, lo, hi) in comp.iqm.items())  # fmt: skip
        each = "each row's columns x seeds, simulated on normal data, after each interval"
        where = f"{coverage_shape(comp)}, simulated on normal data: {levels.pop():.0%}" if one else each
        level = f"its real coverage at {where}"
        lines.append(f"IQM over columns x seeds [{IQM_INTERVAL}; {level}]: {shown}")
    return lines


def coverage_shape(comp: Comparison) -> str:
    """`4 columns x 3 seeds` (or `x 2-3 seeds`): the shape an IQM interval's coverage was simulated at."""
    row = next(iter(comp.iqm))
    ns = sorted({comp.cells[row, col].n for col in comp.cols})
    seeds = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    return f"{len(comp.cols)} column{'s' if len(comp.cols) > 1 else ''} x {seeds} seed{'s' if ns[-1] > 1 else ''}"


def protocol_lines(comps: list[Comparison]) -> list[str]:
    """The declared protocol behind the verdicts, said once under the table(s): the test, the family and its
    size, alpha, and the equivalence margin or that none was declared."""
    protocol = comps[0].protocol
    if protocol is None or not any(comp.pairs.get(col) for comp in comps for col in comp.cols):
        return []
    alpha = f"{protocol.alpha:g}"
    logs = [c.metric for c in comps if any(p["scale"] == "log" for col in c.cols for p in c.pairs[col])]
    on_log = f" (on log values for {', '.join(logs)}: its ratio of geometric means)" if logs else ""
    if protocol.primary:
        family = f"the {protocol.family} tests of the primary metric {protocol.primary} (every pair x column)"
        if protocol.exploratory:
            family += f"; the {protocol.exploratory} tests of the other metrics are exploratory (Holm over those)"
    else:
        family = f"the {protocol.family} tests of every pair x column x metric shown"
    pairs = [p for c in comps for col in c.cols for p in c.pairs.get(col, [])]
    test = "Welch's t-test over seeds"
    if any(p.get("test", "").startswith("t-test over seeds and") for p in pairs):  # compare/evaluation_sampling.py
        test = "the t-test over seeds and evaluation examples (Welch's t-test over seeds where runs kept no outcomes)"
    lines = [f"tests: per pair of rows in a column, {test}{on_log}, Holm-adjusted over one family: "
             f"{family}; alpha {alpha}"]  # fmt: skip
    if protocol.margins:
        margins = ", ".join(f"{m} ±{v:g}" + (" (log scale)" if m in logs else "") for m, v in protocol.margins.items())
        where = f" (declared {protocol.margin_source})" if protocol.margin_source else ""
        lines.append(f"verdicts: better / worse: Holm p < {alpha}; equivalent within ±m: two one-sided Welch tests "
                     f"(TOST), Holm p < {alpha}, margin {margins}{where}; otherwise inconclusive")  # fmt: skip
    else:
        lines.append(f"verdicts: better / worse: Holm p < {alpha}; otherwise inconclusive (no equivalence margin "
                     "declared: --margin M or the sweep file's `compare: {margin: M}`; inconclusive is not evidence "
                     "of no difference)")  # fmt: skip
    return lines


def precondition_lines(comp: Comparison) -> list[str]:
    """The declared preconditions, the mark of a cell that fails them and what that costs it, and each such cell."""
    if not comp.preconditions:
        return []
    where = f" (declared {comp.precondition_source})" if comp.precondition_source else ""
    declared = f"{', '.join(comp.preconditions)}{where}"
    if not comp.failed:
        return [f"precondition {declared}: every cell passes"]
    failed = "; ".join(f"{row} / {col}: {why}" for (row, col), why in sorted(comp.failed.items()))
    return [f"{MARK}: fails the precondition {declared}: no rank, its pairs untested (precondition failed), its row "
            f"left out of mean rank, MRR and IQM; {failed}"]  # fmt: skip


def notes(comp: Comparison) -> list[str]:
    """Lines printed under the table: the tests, the --best-over candidates, then excluded runs by cell and reason."""
    lines = [comp.tests[c] for c in comp.cols]
    if comp.ood_selection:
        lines.append(f"selected on a beyond-training-length metric: {comp.ood_selection}")
    lines += precondition_lines(comp)
    few = sum(cell.n < FEW_SEEDS for cell in comp.cells.values())
    if few:
        lines.append(f"few seeds (n < {FEW_SEEDS} in {few} of {len(comp.cells)} cells): intervals are wide by design")
    lines += aggregate_lines(comp)
    for (row, col), candidates in sorted(comp.alternatives.items()):
        shown = ", ".join(f"{k}: {fmt(v)}" for k, v in candidates.items())
        lines.append(f"{row} / {col}: {comp.best_over} -> {comp.cells[row, col].chosen} ({comp.aggregate}s {shown})")
    by_reason = Counter((e.row, e.col, e.reason) for e in comp.excluded)
    if by_reason:
        lines.append(f"excluded {len(comp.excluded)} run(s) [{comp.metric}]:")
        lines += [f"  {row} / {col}: {n} x {reason}" for (row, col, reason), n in sorted(by_reason.items())]
    return lines
