"""What every interval `cli.py compare` prints really covers (issue 44.4): vectorised simulations of each
interval's coverage, and the real level of a cell's interval at the cell's own shape, which the table prints
when it is more than `TOLERANCE` (2 points) from the nominal 95 %.

The intervals and what is known of them:

- the median's order-statistic interval (`median_ranks`): distribution-free; its exact level is a binomial sum
  fixed by n (n = 3: 75 %, n = 10: 97.9 %, not the 95 % it was labelled with), printed when off by > 2 points.
- the mean's Student-t interval (`t_interval`): exact on normal data, conservative on symmetric heavy tails (t with
  3 df: 96 %), but skewed data make it miss: near a bound of the metric (an accuracy near 0 or 1: Beta(0.3, 5)
  76 % at n = 3) or a skewed positive metric (a lognormal loss: 82 % at n = 5).
- rliable's IQM interval (across_tasks.py): a percentile bootstrap whose level depends on the table's shape;
  `iqm_shape_coverage` simulates it on any distribution (the footer's level is simulated on normal data).
- the two-stage interval of resampling.py: `two_stage_coverage` simulates seeds x examples of 0/1 outcomes.

The real level of a cell's t interval (`mean_level`): the skewness that costs coverage cannot be estimated from
2-10 values directly, so the level comes from a one-parameter family chosen by the metric's range, indexed by the
coefficient of variation (CV) of the values' distance to the range's nearer end:

- a metric bounded on both sides (accuracy, F1 in [0, 1]): the distance to the nearer bound is Gamma (a Beta's
  limit near its bound; far from the bounds its CV is small and the family is nearly normal);
- a metric bounded on one side (loss >= 0, perplexity >= 1): the distance to the bound is lognormal (perplexity is
  exp(loss): spread across seeds is multiplicative);
- an unbounded metric: no skew can be inferred and the t interval's level is taken as nominal (exact for normal
  values, 95-96 % for symmetric heavy tails; a skewed unbounded metric is not covered: the docs say so).

The sample CV of n values is biased low for skewed data (a small sample rarely holds the tail), so a plug-in fit
prints levels 5-10 points too high. Instead the family's member is found whose *median* sample CV at this n equals
the cell's CV (a median-unbiased estimate, by a simulated table per family and n): since coverage falls
monotonically with the CV, the printed level is then median-unbiased for the real one -- half of the cells drawn
from a shape print a level above its real coverage, half below (tests/compare/test_coverage.py checks the median
is within 2 points at n = 2, 3, 5, 10). With n = 2 or 3 a single cell's level is itself uncertain: it is an
estimate of how far the label is off, not a guarantee. The tables are simulated once per (family, n) with a fixed
seed (cached; about 0.1 s each), so a table of any number of cells costs a lookup per cell.
"""

import functools
import math
from collections.abc import Callable

import numpy as np
from scipy import special, stats

from pe_sweeps.compare.across_tasks import LEVEL, bootstrap_coverage

TOLERANCE = 0.02  # a level more than this from nominal is printed
SEED = 0
CV_GRID = np.geomspace(0.01, 8.0, 40)  # the families' members, by their population CV
TABLE_DRAWS = 3000  # simulated cells per member (Monte Carlo error of a level: about 0.4 points)


def t_interval(values, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Student's t interval of the mean over the last axis: mean +- t_{(1+level)/2, n-1} s / sqrt(n).
    Exact coverage for normal values at any n >= 2; vectorised so that a coverage simulation is one call."""
    values = np.asarray(values, dtype=float)
    n = values.shape[-1]
    center = values.mean(axis=-1)
    half = stats.t.ppf((1 + level) / 2, n - 1) * values.std(axis=-1, ddof=1) / math.sqrt(n)
    return center - half, center + half


def median_ranks(n: int, level: float = LEVEL) -> tuple[int, float]:
    """(k, exact level): the median's distribution-free interval is [x_(k), x_(n-1-k)] (0-based order statistics),
    the widest k whose exact coverage 1 - 2 P(Binomial(n, 1/2) <= k) reaches `level` (scipy.stats.quantile_test's
    choice); below n = 6 none does, and k = 0 ([min, max]) at 1 - 2^(1-n)."""
    ks = np.arange(n // 2)
    exact = 1 - 2 * stats.binom.cdf(ks, n, 0.5)
    k = int(ks[exact >= level].max()) if (exact >= level).any() else 0
    return k, float(exact[k])


def shown_level(real: float) -> float:
    """The level a table prints: the nominal one when the real level is within TOLERANCE of it, else the real one."""
    return LEVEL if abs(real - LEVEL) <= TOLERANCE else real


# --- simulated coverage of each interval ---------------------------------------------------------------------


def mean_coverage(dist, n: int, reps: int = 100_000, seed: int = SEED) -> float:
    """Coverage of the t interval of the mean of n values drawn from `dist` (a frozen scipy distribution): the
    fraction of `reps` draws whose interval holds dist.mean()."""
    values = dist.rvs(size=(reps, n), random_state=np.random.default_rng(seed))
    low, high = t_interval(values)
    return float(np.mean((low <= dist.mean()) & (dist.mean() <= high)))


def median_coverage(dist, n: int, reps: int = 100_000, seed: int = SEED) -> float:
    """Coverage of the median's order-statistic interval (`median_ranks`) of n values drawn from `dist`."""
    k, _ = median_ranks(n)
    ordered = np.sort(dist.rvs(size=(reps, n), random_state=np.random.default_rng(seed)), axis=1)
    return float(np.mean((ordered[:, k] <= dist.median()) & (dist.median() <= ordered[:, n - 1 - k])))


def trimmed_mean(dist) -> float:
    """The population IQM of `dist`: its mean between the 25 % and 75 % quantiles (what the IQM estimates)."""
    low, high = dist.ppf(0.25), dist.ppf(0.75)
    return float(dist.expect(lambda x: x, lb=low, ub=high) / 0.5)


def iqm_shape_coverage(dist, shape: tuple[int, ...], draws: int = 1000, resamples: int = 1000,
                       seed: int = SEED) -> float:  # fmt: skip
    """Coverage of rliable's IQM interval (across_tasks.iqm_interval) at a table's shape (seeds per column) when
    every column's seeds are drawn from `dist`; the target is dist's population IQM."""
    rng = np.random.default_rng(seed)
    return bootstrap_coverage(shape, lambda size: dist.rvs(size=size, random_state=rng), trimmed_mean(dist),
                              draws, resamples, rng)  # fmt: skip


def two_stage_outcomes(rng: np.random.Generator, seeds: int, examples: int, seed_sd: float, example_sd: float,
                       shared: bool, mean_logit: float = 1.0) -> np.ndarray:  # fmt: skip
    """(seeds, examples) 0/1 outcomes: P(correct) = sigmoid(mean_logit + a_seed + b_example), a ~ N(0, seed_sd),
    b ~ N(0, example_sd); `shared`: every seed scored on the same examples (one b), else each on its own."""
    a = rng.normal(0, seed_sd, (seeds, 1))
    b = rng.normal(0, example_sd, (1 if shared else seeds, examples))
    return (rng.random((seeds, examples)) < special.expit(mean_logit + a + b)).astype(float)


def two_stage_truth(seed_sd: float, example_sd: float, mean_logit: float = 1.0) -> float:
    """The population accuracy of `two_stage_outcomes`: E sigmoid(mean_logit + sqrt(seed_sd^2 + example_sd^2) Z)
    (Gauss-Hermite quadrature)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return float((special.expit(mean_logit + math.hypot(seed_sd, example_sd) * x) * w).sum() / w.sum())


def two_stage_coverage(seeds: int, examples: int, seed_sd: float, example_sd: float, shared: bool, reps: int = 200,
                       resamples: int = 500, seed: int = SEED, interval: Callable | None = None) -> float:  # fmt: skip
    """Coverage of resampling.cell_interval (or `interval`, same signature) of the population accuracy over
    `reps` simulated cells of `two_stage_outcomes`."""
    from pe_sweeps.compare.resampling import cell_interval

    interval = interval or cell_interval
    rng = np.random.default_rng(seed)
    truth = two_stage_truth(seed_sd, example_sd)
    ids = np.arange(examples)
    hits = 0
    for rep in range(reps):
        y = two_stage_outcomes(rng, seeds, examples, seed_sd, example_sd, shared)
        runs = {s: (ids if shared else ids + examples * s, y[s]) for s in range(seeds)}
        got = interval(runs, shared=shared, resamples=resamples, seed=rep)
        hits += got.low <= truth <= got.high
    return hits / reps


# --- the real level of one cell's t interval -----------------------------------------------------------------


def family(bounds: tuple[float, float]) -> str | None:
    """The skewed family a metric's range implies: 'gamma' (two bounds), 'lognormal' (one), None (unbounded)."""
    finite = sum(math.isfinite(b) for b in bounds)
    return {2: "gamma", 1: "lognormal", 0: None}[finite]


def distance(values, bounds: tuple[float, float]) -> np.ndarray:
    """The values' distance to the metric's nearer end (over the last axis: the end nearer to their mean)."""
    x = np.asarray(values, dtype=float)
    low, high = bounds
    to_low, to_high = x - low, high - x
    if not math.isfinite(high):
        return to_low
    if not math.isfinite(low):
        return to_high
    near_low = to_low.mean(axis=-1, keepdims=True) <= to_high.mean(axis=-1, keepdims=True)
    return np.where(near_low, to_low, to_high)


def sample_cv(u: np.ndarray) -> np.ndarray:
    """sd / mean over the last axis (sd with n-1); inf where the mean is 0 and the sd is not, 0 where both are."""
    mean, sd = u.mean(axis=-1), u.std(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd == 0, 0.0, sd / mean)


def draw_family(name: str, cv: np.ndarray, size: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Draws of the family's members of population CV `cv` (broadcast over the leading axes), mean 1."""
    if name == "gamma":
        shape = 1 / cv**2
        return rng.standard_gamma(np.broadcast_to(shape, size)) / shape
    sigma = np.sqrt(np.log1p(cv**2))
    return np.exp(sigma * rng.standard_normal(size) - sigma**2 / 2)


@functools.lru_cache(maxsize=64)
def level_table(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(median sample CV, t-interval coverage) at each CV_GRID member of a family for n values, simulated with a
    fixed seed; both made monotone along the grid (the median CV rises and the coverage falls with the CV; this
    removes Monte Carlo wiggle, as the mean of the running bounds from either end)."""
    rng = np.random.default_rng(SEED)
    draws = draw_family(name, CV_GRID[:, None, None], (len(CV_GRID), TABLE_DRAWS, n), rng)
    low, high = t_interval(draws)
    covered = ((low <= 1.0) & (1.0 <= high)).mean(axis=1)
    median_cv = np.median(sample_cv(draws), axis=1)
    return monotone(median_cv), -monotone(-covered)


def monotone(y: np.ndarray) -> np.ndarray:
    """A non-decreasing curve close to y: the mean of its running maximum and its running minimum from the end."""
    return (np.maximum.accumulate(y) + np.minimum.accumulate(y[::-1])[::-1]) / 2


def mean_levels(values, bounds: tuple[float, float]) -> np.ndarray:
    """The real coverage of the t interval of each row of `values` (cells x n), at the shape its values suggest
    for a metric of this range (see the module docstring): the family member whose median sample CV at n equals
    the row's, its simulated coverage. Nominal for an unbounded metric."""
    values = np.asarray(values, dtype=float)
    cells, n = values.shape
    name = family(bounds)
    if name is None or n < 2:
        return np.full(cells, LEVEL)
    cv = sample_cv(distance(values, bounds))
    median_cv, covered = level_table(name, n)
    # the member whose median sample CV is the cell's: interpolate on the grid (beyond its ends: its end member)
    where = np.interp(np.nan_to_num(cv, posinf=np.inf), median_cv, np.log(CV_GRID))
    return np.interp(where, np.log(CV_GRID), covered)


def mean_level(values, bounds: tuple[float, float]) -> float:
    """`mean_levels` of one cell."""
    return float(mean_levels(np.asarray(values, dtype=float)[None, :], bounds)[0])
