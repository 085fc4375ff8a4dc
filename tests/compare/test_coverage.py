"""Issue 44.4: every interval `cli.py compare` can print covers what it says, or prints its real level.

Simulated over five shapes of seed values (normal; near 0: Beta(0.3, 5); near 1: Beta(50, 1), both accuracies in
[0, 1]; skewed: lognormal(1), a loss >= 0; heavy-tailed: t with 3 df) at n = 2, 3, 5, 10 seeds: the mean's t
interval and the median's order-statistic interval through `Cell.interval` (the level the table prints), rliable's
IQM interval at a sparse grid of 1-10 columns x 2-10 seeds (the footer's level), and the two-stage interval over
seeds x examples (resampling.cell_interval). Each case: the simulated coverage is within 2 points of nominal, or the
printed level is within 2 points of it -- both up to 3 Monte Carlo standard errors of the simulation.
A cell's printed level is an estimate from its own n values; the median printed level over cells drawn from a
shape is what must match (compare/coverage.py: a median-unbiased fit).
"""

import math

import numpy as np
import pytest
from scipy import stats

from pe_sweeps.compare.across_tasks import iqm_coverage
from pe_sweeps.compare.comparison import LEVEL, Cell
from pe_sweeps.compare.coverage import (
    TOLERANCE,
    iqm_shape_coverage,
    mean_coverage,
    median_coverage,
    median_ranks,
    two_stage_coverage,
)

UNBOUNDED = (-math.inf, math.inf)
SHAPES = {  # name: (distribution, the metric's range)
    "normal": (stats.norm(0.0, 1.0), UNBOUNDED),
    "near-0": (stats.beta(0.3, 5), (0.0, 1.0)),
    "near-1": (stats.beta(50, 1), (0.0, 1.0)),
    "skewed": (stats.lognorm(1.0), (0.0, math.inf)),
    "heavy-tailed": (stats.t(3), UNBOUNDED),
}
NS = (2, 3, 5, 10)
REPS = 20_000  # draws of a cell per coverage (Monte Carlo standard error about 0.3 points)
CELLS = 300  # cells whose printed level is read per case


def se(p: float, draws: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.01) / draws)


def printed_levels(shape: str, n: int, aggregate: str) -> np.ndarray:
    dist, bounds = SHAPES[shape]
    values = dist.rvs(size=(CELLS, n), random_state=np.random.default_rng(n))
    return np.array([Cell([{}] * n, list(v), aggregate, bounds=bounds).interval.level for v in values])


def assert_honest(real: float, real_se: float, printed: float, printed_se: float = 0.0):
    nominal_ok = abs(real - LEVEL) <= TOLERANCE + 3 * real_se
    printed_ok = abs(printed - real) <= TOLERANCE + 3 * math.hypot(real_se, printed_se)
    assert nominal_ok or printed_ok, f"covers {real:.3f}, labelled {printed:.3f} (nominal {LEVEL})"


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("shape", SHAPES)
def test_the_mean_interval_covers_its_printed_level(shape, n):
    """Near 0 or 1 the t interval covered 76-91 % and the table said 95 % (Beta(0.3, 5), n = 3: 76 %)."""
    real = mean_coverage(SHAPES[shape][0], n, REPS)
    levels = printed_levels(shape, n, "mean")
    # standard error of a median: 1.25 sd / sqrt(cells)
    assert_honest(real, se(real, REPS), float(np.median(levels)), 1.25 * float(np.std(levels)) / math.sqrt(CELLS))


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("shape", SHAPES)
def test_the_median_interval_covers_its_printed_level(shape, n):
    """The order-statistic interval is distribution-free; n = 10 covers 97.9 % and was labelled 95 %."""
    real = median_coverage(SHAPES[shape][0], n, REPS)
    (level,) = set(printed_levels(shape, n, "median")[:20])
    assert_honest(real, se(real, REPS), level)


@pytest.mark.parametrize("n", range(2, 31))
def test_median_ranks_are_quantile_tests_order_statistics(n):
    values = list(np.arange(n, dtype=float))
    k, level = median_ranks(n)
    ci = stats.quantile_test(values, q=0.0, p=0.5).confidence_interval(LEVEL)
    if n >= 6:
        assert (ci.low, ci.high) == (k, n - 1 - k) and level >= LEVEL
    else:
        assert math.isnan(ci.low) and k == 0 and level == pytest.approx(1 - 2.0 ** (1 - n))


IQM_DRAWS = 300
IQM_GRID = [(1, 2), (3, 3), (10, 2), (2, 10)]  # columns x seeds: a sparse grid of 1-10 x 2-10


@pytest.mark.parametrize("columns, seeds", IQM_GRID)
@pytest.mark.parametrize("shape", ["normal", "near-0", "skewed"])
def test_the_iqm_interval_covers_its_printed_level(shape, columns, seeds):
    """The footer prints the IQM interval's coverage simulated for the table's shape on normal data."""
    grid = (seeds,) * columns
    real = iqm_shape_coverage(SHAPES[shape][0], grid, draws=IQM_DRAWS, resamples=300)
    assert_honest(real, se(real, IQM_DRAWS), iqm_coverage(grid))


TWO_STAGE_REPS = 100


@pytest.mark.parametrize("shared", [True, False], ids=["shared-cut", "per-seed-cuts"])
@pytest.mark.parametrize("seeds, seed_sd, example_sd", [(2, 0.5, 0.5), (3, 0.5, 0.5), (5, 0.5, 0.5), (10, 0.5, 0.5),
                                                        
                                                        (3, 1.0, 0.2), (5, 1.0, 0.2), (10, 1.0, 0.2)])  # fmt: skip
def test_the_two_stage_interval_covers_its_level(seeds, seed_sd, example_sd, shared):
    """resampling.cell_interval over seeds x examples (logit sd of the seeds and examples, 0/1 outcomes): its
    percentile version covered 62 % at 2 seeds and 74 % at 3 when the seeds dominate (shared cut); studentised,
    within 2 points (+ Monte Carlo error) from 3 seeds on."""
    real = two_stage_coverage(seeds, 60, seed_sd, example_sd, shared, reps=TWO_STAGE_REPS, resamples=200)
    assert_honest(real, se(real, TWO_STAGE_REPS), LEVEL)
