"""A cell's interval and a pair's test with the evaluation set's own sampling in them, from the runs' per-example
outcomes (pe_sweeps/runs/outcomes.py): variance components with Welch-Satterthwaite degrees of freedom (issue 44.1).

A cell's value is the mean over its S seeds of each run's statistic on its evaluation examples (an accuracy: the
share right; on the synthetic tasks the mean over lengths of each length's share, so the examples are stratified by
length). Its variance has two sources, the seeds (initialisation, batch order, the data when the data seed follows
the seed) and the examples the evaluation happened to draw, and how they enter depends on the design, which the
runs' outcome fingerprints tell:

- **independent cuts**: every run evaluated examples of its own (a synthetic task whose data seed follows the seed).
  The runs' statistics are independent draws that already carry both sources, and Student's t over the seeds is
  the interval (exact for normal values): s^2 / S with S - 1 degrees of freedom, but never below the runs' own
  examples' variance (two seeds can tie on a discrete accuracy by chance: no certainty follows from that).
- **one shared cut**: every run evaluated the same examples (PE-Study's fixed `split_seed`, a fixed data seed). The
  cut's sampling is common to all seeds and invisible to a seed-only interval. Var(cell) = s^2 / S (the runs'
  statistics over seeds) + V (the stratified variance of the mean of the examples' means over seeds: sum over
  strata k of (1/K)^2 s_k^2 / n_k), each term scaled by its own degrees of freedom's t quantile (S - 1 and N - K;
  `combined`). (The seed x example interaction enters both terms: slightly conservative.) One seed gets no
  interval: the cut's sampling alone says nothing of the seeds' spread.

A pair a - b, by the same rules: on one shared cut, the per-example differences (the same seeds in both rows:
d_si = a_si - b_si, paired by seed and example; else both rows' seed terms plus the examples term of m^a_i - m^b_i);
on independent cuts where a's and b's runs of each seed evaluated the same examples, the paired t over seeds of
d_s = a_s - b_s; otherwise Welch over the seeds. Equivalence within a margin m: two one-sided tests (TOST) with
the same standard error and degrees of freedom. Anything else (mixed designs, runs without outcomes, a metric the
outcomes do not decompose) is None here, and compare falls back to the seeds-only test and says so.

Coverage and false separations: tests/compare/test_evaluation_sampling.py simulates both.
"""

import math
import re
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from scipy import optimize, special

from pe_sweeps.runs.outcomes import outcome_table
from pe_sweeps.runs.records import RunRecord

METHOD = "seeds+examples"
COLUMNS = {"acc": "correct", "tok_acc": "tok_acc", "loss": "nll"}
SHORT = re.compile(r"^(acc|tok_acc|loss)(?:(_ood)|_len_(\d+))?$")
TOLERANCE = 1e-3  # the outcomes' statistic must reproduce the logged value (float16 columns: ~5e-4 each)


# Student's t quantile and survival function: scipy.special's, which scipy.stats.t's ppf and sf call (t._ppf,
# t._sf) after argument checks costing ~0.2 ms a call; an atlas's compare asks them ~10^5 times
t_quantile, t_survival = special.stdtrit, lambda df, x: special.stdtr(df, -x)


@dataclass(frozen=True)
class RunOutcomes:
    """One run's per-example values of one statistic: ids, values and strata (the task length, else 0)."""

    ids: np.ndarray
    values: np.ndarray
    strata: np.ndarray
    fingerprint: str | None

    @cached_property  # asked once per pair of cells: with 40 rows, 39 times per run
    def statistic(self) -> float:
        return float(np.mean([self.values[self.strata == k].mean() for k in np.unique(self.strata)]))

    @cached_property
    def id_order(self) -> np.ndarray:
        """The permutation that sorts its examples by id (how runs of one cut are aligned)."""
        return np.argsort(self.ids, kind="stable")

    @cached_property
    def sorted_strata(self) -> tuple[np.ndarray, np.ndarray]:
        """Its strata in id order as (codes 0..K-1, stratum sizes), for `coded_variance`."""
        _, codes, sizes = np.unique(self.strata[self.id_order], return_inverse=True, return_counts=True)
        return codes, sizes

    @cached_property
    def own_variance(self) -> float:
        """The variance of its statistic from its own examples' sampling (`strata_variance`)."""
        return strata_variance(self.values, self.strata)[0]


@dataclass(frozen=True)
class Estimate:
    """An estimate (a cell's mean, or a pair's difference), its standard error and degrees of freedom, and the
    design they were derived under. `parts`: on a shared cut, the seed and example terms ((variance, df), ...) of
    the variance; the interval's half-width is then sqrt(sum of t_{q, df_i}^2 variance_i), each term scaled by its
    own degrees of freedom's t quantile (see `combined`); else t_{q, df} se."""

    estimate: float
    se: float
    df: float  # Welch-Satterthwaite's, shown in the json; the interval uses `parts` where there are any
    design: str  # "shared cut", "independent cuts", "paired by seed", "shared cut, paired by seed"
    seeds: int
    examples: int | None = None  # per run (the shared cut's size, or the smallest evaluation)
    parts: tuple = ()

    def half_width(self, quantile: float) -> float:
        """The half-width at the t quantile `quantile` (0.975: a two-sided 95 % interval)."""
        if self.parts:
            return math.sqrt(sum(float(t_quantile(df, quantile)) ** 2 * v for v, df in self.parts if v > 0))
        return float(t_quantile(self.df, quantile)) * self.se

    def testable(self) -> bool:
        return self.se > 0 and self.df > 0

    def interval(self, level: float) -> tuple[float, float]:
        if self.se == 0:
            return self.estimate, self.estimate
        if not self.df > 0:
            return math.nan, math.nan
        half = self.half_width((1 + level) / 2)
        return self.estimate - half, self.estimate + half

    def one_sided(self, x: float) -> float:
        """p of a one-sided test whose statistic is x (in the estimate's units): the level whose one-sided bound
        is x, so that p < alpha exactly when x lies beyond the (1 - alpha) bound."""
        if x <= 0:
            return 1.0 - self.one_sided(-x) if x < 0 else 0.5
        if not self.parts:
            return float(t_survival(self.df, x / self.se))
        if self.half_width(1 - 1e-15) <= x:
            return 1e-15
        return float(optimize.brentq(lambda a: self.half_width(1 - a) - x, 1e-15, 0.5, xtol=1e-12))

    def p_value(self) -> float:
        """Two-sided p of estimate = 0; NaN when the standard error is 0 (nothing varies)."""
        return min(1.0, 2 * self.one_sided(abs(self.estimate))) if self.testable() else math.nan

    def p_equivalence(self, margin: float) -> float:
        """TOST's p of |estimate| < margin: the larger p of the two one-sided tests (Schuirmann 1987)."""
        if not self.testable():
            return math.nan
        above = self.one_sided(self.estimate + margin)  # H0: difference <= -margin
        below = self.one_sided(margin - self.estimate)  # H0: difference >= +margin
        return float(max(above, below))


def run_outcomes(record: RunRecord, metric: str, value: str) -> RunOutcomes | None:
    """A run's per-example values of `metric` at its final validation, when its outcomes reproduce the logged value
    (so a metric they do not decompose, or outcomes of another step, are never used); else None."""
    stage, _, short = metric.partition("/")
    match = SHORT.match(short)
    pointer = (record.outcomes or {}).get(stage)
    if value != "final" or match is None or not pointer or stage not in ("val", "test"):
        return None
    if stage == "val" and record.history and record.history[-1].get("step") != pointer.get("step"):
        return None  # outcomes of another validation than the final one
    logged = record.final.get(metric)
    logged = None if logged is None else float(logged)
    table = outcome_table(record, stage)
    if table is None or logged is None or COLUMNS[match[1]] not in table:
        return None
    keep = selected(table, match, record)
    if keep is None or not keep.any():
        return None
    strata = table["length"][keep] if "length" in table else np.zeros(int(keep.sum()), dtype=np.int64)
    values = table[COLUMNS[match[1]]][keep].astype(np.float64)
    candidates = [values]
    if "tokens" in table and "length" not in table:  # a language model's token-weighted mean
        candidates.append(token_weighted(values, table["tokens"][keep].astype(np.float64)))
    for candidate in candidates:
        found = RunOutcomes(table["id"][keep], candidate, strata, pointer.get("fingerprint"))
        if np.isfinite(candidate).all() and abs(found.statistic - float(logged)) <= TOLERANCE * max(1.0, abs(logged)):
            return found
    return None


def token_weighted(values: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Per-example values whose plain mean is the token-weighted mean sum(t y) / sum(t), linearised (the ratio
    estimator's influence values theta + t (y - theta) / mean(t)), so their variance is the weighted mean's."""
    if tokens.sum() <= 0:
        return np.full_like(values, np.nan)
    scored = tokens > 0
    theta = float((tokens * np.where(scored, values, 0.0)).sum() / tokens.sum())
    return theta + tokens * (np.where(scored, values, theta) - theta) / tokens.mean()


def selected(table: dict, match: re.Match, record: RunRecord) -> np.ndarray | None:
    """Which examples a metric averages: a synthetic task's in-distribution lengths (`acc`), those beyond (`_ood`)
    or one length (`_len_N`); every example of a table without lengths (classification)."""
    ood, length = match[2], match[3]
    if "length" not in table:
        return None if ood or length else np.ones(len(table["id"]), dtype=bool)
    if length is not None:
        return table["length"] == int(length)
    data = (record.config.get("data") or {}).get("init_args") or record.config.get("data") or {}
    boundary = data.get("train_max_len")
    if boundary is None:
        return None
    return table["length"] > boundary if ood else table["length"] <= boundary


def design(runs: list[RunOutcomes]) -> str | None:
    """ "shared cut" (one fingerprint), "independent cuts" (all different) or None (mixed, or unknown)."""
    prints = [r.fingerprint for r in runs]
    if any(p is None for p in prints):
        return None
    if len(set(prints)) == 1:
        return "shared cut"
    return "independent cuts" if len(set(prints)) == len(prints) else None


def cell_estimate(runs: list[RunOutcomes]) -> Estimate | None:
    """A cell's mean over seeds with a standard error that includes the evaluation set's sampling (module
    docstring); None for a design it does not cover."""
    kind = design(runs)
    statistics = np.array([r.statistic for r in runs])
    mean, seeds = float(statistics.mean()), len(runs)
    examples = min(len(r.ids) for r in runs)
    if seeds < 2:  # one seed: its cut's sampling only, which covers the mean over seeds 41-71 % when seeds matter
        return None
    if kind == "independent cuts":
        floor = np.mean([r.own_variance for r in runs]) / seeds
        return Estimate(mean, floored_se(statistics, floor), seeds - 1, kind, seeds, examples)
    if kind == "shared cut":
        per_example = np.stack([aligned(r, runs[0]) for r in runs]).mean(0)
        return combined(mean, [statistics], per_example, runs[0].strata[order(runs[0])], kind, examples)
    return None


def pair_estimate(a: list[RunOutcomes], b: list[RunOutcomes], seeds_a: list, seeds_b: list) -> Estimate | None:
    """a's mean minus b's with a standard error that includes the evaluation set's sampling, paired by seed and by
    example wherever the two rows share them (module docstring); None for a design it does not cover."""
    kind_a, kind_b = design(a), design(b)
    if len(a) < 2 or len(b) < 2:  # a row of one seed says nothing of the seeds' spread
        return None
    same_seeds = sorted(map(str, seeds_a)) == sorted(map(str, seeds_b)) and len(set(map(str, seeds_a))) == len(a)
    stat_a, stat_b = np.array([r.statistic for r in a]), np.array([r.statistic for r in b])
    difference = float(stat_a.mean() - stat_b.mean())
    if kind_a == kind_b == "shared cut" and a[0].fingerprint == b[0].fingerprint:
        reference, examples = a[0], len(a[0].ids)
        strata = reference.strata[order(reference)]
        if same_seeds:
            by_seed_b = dict(zip(map(str, seeds_b), b))
            d = np.stack([aligned(r, reference) - aligned(by_seed_b[str(s)], reference) for r, s in zip(a, seeds_a)])
            stat_d = np.array([r.statistic for r in a]) - np.array([by_seed_b[str(s)].statistic for s in seeds_a])
            return combined(difference, [stat_d], d.mean(0), strata, "shared cut, paired by seed", examples)
        m = np.stack([aligned(r, reference) for r in a]).mean(0) - np.stack([aligned(r, reference) for r in b]).mean(0)
        return combined(difference, [stat_a, stat_b], m, strata, "shared cut", examples)
    if kind_a == kind_b == "independent cuts" and same_seeds:
        by_seed_b = dict(zip(map(str, seeds_b), b))
        if all(r.fingerprint == by_seed_b[str(s)].fingerprint for r, s in zip(a, seeds_a)) and len(a) >= 2:
            d = np.array([r.statistic - by_seed_b[str(s)].statistic for r, s in zip(a, seeds_a)])
            within = [coded_variance(aligned(r, r) - aligned(by_seed_b[str(s)], r), *r.sorted_strata)
                      for r, s in zip(a, seeds_a)]  # fmt: skip
            se = floored_se(d, np.mean(within) / len(d))
            return Estimate(difference, se, len(d) - 1, "paired by seed", len(d), min(len(r.ids) for r in a))
    if kind_a == kind_b == "independent cuts" and len(a) >= 2 and len(b) >= 2:
        terms = [(floored_se(stat, np.mean([r.own_variance for r in runs]) / len(runs)) ** 2,
                  len(runs) - 1) for stat, runs in ((stat_a, a), (stat_b, b))]  # fmt: skip
        return satterthwaite(difference, terms, "independent cuts", min(len(a), len(b)), None)
    return None


def floored_se(values: np.ndarray, floor: float) -> float:
    """The standard error of the mean of runs' statistics over seeds, at least what the runs' own evaluation
    examples give (`floor`, a variance): each run's statistic varies by its examples' sampling at least, so a spread
    over seeds below that (two seeds tying by chance on a discrete accuracy) is not taken as certainty."""
    return math.sqrt(max(float(np.var(values, ddof=1)) / len(values), float(floor)))


def seed_se(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def order(run: RunOutcomes) -> np.ndarray:
    return run.id_order


def aligned(run: RunOutcomes, reference: RunOutcomes) -> np.ndarray:
    """A run's values in the order of `reference`'s sorted ids (ValueError when its examples differ)."""
    ids = run.ids[order(run)]
    if not np.array_equal(ids, reference.ids[order(reference)]):
        raise ValueError("runs of one fingerprint with other example ids")
    return run.values[order(run)]


def strata_variance(per_example: np.ndarray, strata: np.ndarray) -> tuple[float, int]:
    """The variance of a stratified mean (the mean over strata of each stratum's mean) and its degrees of freedom."""
    _, codes, sizes = np.unique(strata, return_inverse=True, return_counts=True)
    return coded_variance(per_example, codes, sizes), int((sizes - 1).sum())


def coded_variance(per_example: np.ndarray, codes: np.ndarray, sizes: np.ndarray) -> float:
    """`strata_variance`'s variance, the strata given as codes 0..K-1 with their sizes."""
    means = np.bincount(codes, weights=per_example) / sizes
    squares = np.bincount(codes, weights=(per_example - means[codes]) ** 2)  # two passes, as ndarray.var
    several = sizes > 1
    return float((squares[several] / (sizes[several] - 1) / sizes[several]).sum()) / len(sizes) ** 2


def combined(estimate: float, seed_terms: list[np.ndarray], per_example: np.ndarray, strata: np.ndarray, kind: str,
             examples: int) -> Estimate:  # fmt: skip
    """The shared-cut estimate: the rows' seed terms (s^2 / S, S - 1 df; Welch-Satterthwaite over two rows) plus
    the examples' term. Its interval scales each of the two by its own t quantile (`Estimate.half_width`), not
    by one Satterthwaite df: with 2 or 3 seeds Satterthwaite's df is generous exactly when the seed variance comes
    out small by chance, and the interval covered 87.5 % at 2 seeds when the seeds' spread dominated
    (benchmarks/coverage_table.py); this one is exact when either term dominates and conservative between
    (normal theory: at most 98.7 % at 2 seeds, 97.6 % at 3, 96.6 % at 5)."""
    seeds = [(t.var(ddof=1) / len(t), len(t) - 1) for t in seed_terms if len(t) > 1]
    parts = [welch_term(seeds)] if seeds else []
    parts.append(strata_variance(per_example, strata))
    found = satterthwaite(estimate, seeds + parts[-1:], kind, min(len(t) for t in seed_terms), examples)
    return replace(found, parts=tuple(parts))


def welch_term(terms: list[tuple[float, int]]) -> tuple[float, float]:
    """Independent variance terms as one (their sum, Welch-Satterthwaite's df)."""
    variance = sum(v for v, _ in terms)
    denominator = sum(v * v / df for v, df in terms if df > 0)
    return variance, (variance * variance / denominator if denominator > 0 else 0.0)


def satterthwaite(estimate: float, terms: list[tuple[float, int]], kind: str, seeds: int, examples) -> Estimate:
    """Sum of independent variance terms (variance, df) with Welch-Satterthwaite's degrees of freedom."""
    variance = sum(v for v, _ in terms)
    denominator = sum(v * v / df for v, df in terms if df > 0)
    df = variance * variance / denominator if denominator > 0 else 0.0
    return Estimate(estimate, math.sqrt(variance), df, kind, seeds, examples)
