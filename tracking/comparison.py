"""What a comparison holds and how one cell reads: shared by the table (tracking/compare.py) and the
report (tracking/compare_report.py), so that neither imports the other."""

import functools
import math
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from lightning_modules.metrics import goal

IDENTITY = ("name", "group", "task", "encoding", "seed", "sweep", "subcommand", "status")
RESAMPLES, BOOTSTRAP_SEED = 10_000, 0
INTERVAL = f"95% percentile bootstrap over seeds ({RESAMPLES:,} resamples, RNG seed {BOOTSTRAP_SEED})"


@dataclass
class Cell:
    """The runs of one (row, column) cell and their statistics over seeds."""

    records: list[dict]
    values: list[float]
    aggregate: str = "mean"
    chosen: str | None = None  # the --best-over value this cell kept

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
    def ci(self) -> tuple[float, float]:
        """95% percentile-bootstrap interval of the aggregate (NaN for n < 2). A percentile interval
        is made of resampled aggregates, so it stays within [min, max] of the values."""
        if self.n < 2:
            return math.nan, math.nan
        if min(self.values) == max(self.values):
            return self.values[0], self.values[0]
        statistic = np.median if self.aggregate == "median" else np.mean
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # few seeds: scipy warns that the distribution is discrete
            result = stats.bootstrap(
                (np.asarray(self.values),), statistic, n_resamples=RESAMPLES, method="percentile",
                random_state=np.random.default_rng(BOOTSTRAP_SEED),
            )  # fmt: skip
        low, high = np.clip(result.confidence_interval, min(self.values), max(self.values))  # float rounding of means
        return float(low), float(high)

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
    pairs: dict[str, list[dict]] = field(default_factory=dict)  # per column: every tested pair, raw and Holm p
    aggregate: str = "mean"
    best_over: str | None = None
    alternatives: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)  # best-over candidates
    declared_goal: str | None = None  # "max"/"min" from the sweep file's metric(s); else by the metric's name

    @property
    def goal(self) -> str:
        return self.declared_goal or goal(self.metric)

    def is_best(self, row: str, col: str) -> bool:
        return self.ranks.get((row, col)) == min(self.ranks[r, col] for r in self.rows if (r, col) in self.ranks)


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


def fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.4g}"


def cell_number(x: float, cell: Cell) -> str:
    """A number of this cell to the precision its interval justifies (3 significant digits without one)."""
    if math.isnan(x):
        return "nan"
    decimals = cell.decimals
    return f"{x:.3g}" if decimals is None else f"{x:.{decimals}f}"


def cell_text(cell: Cell, rank: float, best: bool) -> str:
    spread = "" if cell.n < 2 else f" ± {cell_number(cell.std, cell)}"
    lo, hi = cell.ci
    ci = "" if cell.n < 2 else f" [{cell_number(lo, cell)}, {cell_number(hi, cell)}]"
    chosen = "" if cell.chosen is None else f" @{cell.chosen}"
    return f"{'* ' if best else ''}{cell_number(cell.center, cell)}{spread} (n={cell.n}){ci} #{rank:g}{chosen}"


def legend(comp: Comparison, best: str = "*") -> str:
    chosen = f"; @value: the {comp.best_over} whose {comp.aggregate} is best in that cell" if comp.best_over else ""
    return (
        f"{best}: best in column ({comp.goal} of {comp.value} {comp.metric}); {comp.aggregate} ± std (n) "
        f"[{INTERVAL}] #rank in column{chosen}; digits: two significant digits of the interval's width"
    )


def notes(comp: Comparison) -> list[str]:
    """Lines printed under the table: the tests, the --best-over candidates, then excluded runs by cell and reason."""
    lines = [comp.tests[c] for c in comp.cols]
    for (row, col), candidates in sorted(comp.alternatives.items()):
        shown = ", ".join(f"{k}: {fmt(v)}" for k, v in candidates.items())
        lines.append(f"{row} / {col}: {comp.best_over} -> {comp.cells[row, col].chosen} ({comp.aggregate}s {shown})")
    by_reason = Counter((e.row, e.col, e.reason) for e in comp.excluded)
    if by_reason:
        lines.append(f"excluded {len(comp.excluded)} run(s) [{comp.metric}]:")
        lines += [f"  {row} / {col}: {n} x {reason}" for (row, col, reason), n in sorted(by_reason.items())]
    return lines
