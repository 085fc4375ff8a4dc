"""Intervals and pair tests with the evaluation set's sampling in them (pe_sweeps/compare/evaluation_sampling.py),
issue 44.1.

Simulated as in the finding: encodings a and b of the SAME population accuracy that get different examples right
(b's per-example ease is a's permuted), scored on one evaluation cut of N examples shared by every seed and both
rows; each seed shifts a model's logit by N(0, seed_sd). Claims:
- "on a shared cut a seed-only Welch test separates equals far more often than alpha, the seeds+examples test near
  alpha; the seeds+examples interval covers the population mean near 95 % where the seed-only t interval does not":
  test_shared_cut_false_separations_and_coverage
- "on independent cuts it is Student's t over seeds (closed form) and, paired by seed, the paired t":
  test_independent_cuts_are_the_t_interval_and_the_paired_t
- "with one seed on a shared cut the interval is the cut's own sampling (the binomial standard error)":
  test_one_seed_on_a_shared_cut_is_the_binomial_interval
- "a real difference is still found": test_a_real_difference_is_separated
"""

import numpy as np
import pytest
from scipy import stats

from pe_sweeps.compare.evaluation_sampling import RunOutcomes, cell_estimate, pair_estimate

BASE, JITTER, DRAWS, ALPHA = 0.8, 0.2, 150, 0.05


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.fixture(scope="module")
def population():
    rng = np.random.default_rng(1)
    u = rng.normal(0, 3.0, 50_000)
    return u, rng.permutation(u)


def scored(rng, ease, seeds, seed_sd, fingerprint, shift=0.0, shared=True):
    """One row's runs: `seeds` models scored (0/1 per example) on the examples of ease `ease`."""
    runs = []
    for s in range(seeds):
        p = sigmoid(BASE + shift + ease + rng.normal(0, seed_sd) + rng.normal(0, JITTER, ease.size))
        y = (rng.random(ease.size) < p).astype(float)
        runs.append(RunOutcomes(np.arange(ease.size), y, np.zeros(ease.size, int), fingerprint if shared else f"{s}"))
    return runs


@pytest.mark.parametrize("seeds, seed_sd", [(3, 0.03), (5, 0.03), (3, 0.5), (5, 0.5)])
@pytest.mark.filterwarnings("ignore:Precision loss")
def test_shared_cut_false_separations_and_coverage(population, seeds, seed_sd):
    u, v = population
    rng = np.random.default_rng(seeds * 10 + int(seed_sd * 100))
    truth = np.mean([sigmoid(BASE + u + rng.normal(0, seed_sd) + rng.normal(0, JITTER, u.size)).mean()
                     for _ in range(100)])  # fmt: skip
    welch = new = covered = covered_t = 0
    for _ in range(DRAWS):
        cut = u[idx := rng.integers(0, u.size, 200)], v[idx]
        a, b = scored(rng, cut[0], seeds, seed_sd, "cut"), scored(rng, cut[1], seeds, seed_sd, "cut")
        per_seed_a, per_seed_b = [r.statistic for r in a], [r.statistic for r in b]
        welch += stats.ttest_ind(per_seed_a, per_seed_b, equal_var=False).pvalue < ALPHA
        new += pair_estimate(a, b, list(range(seeds)), list(range(seeds))).p_value() < ALPHA
        low, high = cell_estimate(a).interval(0.95)
        covered += low <= truth <= high
        t_low, t_high = stats.t.interval(0.95, seeds - 1, np.mean(per_seed_a), stats.sem(per_seed_a))
        covered_t += t_low <= truth <= t_high
    if seed_sd < 0.1:  # the cut's sampling dominates: the finding
        assert welch / DRAWS > 0.15 and covered_t / DRAWS < 0.88
    assert new / DRAWS <= ALPHA + 0.045  # Monte Carlo error at 150 draws: ~1.8 points
    assert covered / DRAWS >= 0.95 - 0.045


def test_independent_cuts_are_the_t_interval_and_the_paired_t(population):
    u, _ = population
    rng = np.random.default_rng(3)
    a = scored(rng, u[:300], 4, 0.3, "x", shared=False)
    b = scored(rng, u[:300], 4, 0.3, "x", shift=0.5, shared=False)
    stat_a = [r.statistic for r in a]
    low, high = cell_estimate(a).interval(0.95)
    expected = stats.t.interval(0.95, 3, np.mean(stat_a), stats.sem(stat_a))
    assert (low, high) == pytest.approx(expected)
    paired = pair_estimate(a, b, [0, 1, 2, 3], [0, 1, 2, 3])  # seed s of a and b: the same fingerprint "s"
    assert paired.design == "paired by seed"
    assert paired.p_value() == pytest.approx(stats.ttest_rel(stat_a, [r.statistic for r in b]).pvalue)
    unpaired = pair_estimate(a, b, [0, 1, 2, 3], [4, 5, 6, 7])
    assert unpaired.p_value() == pytest.approx(stats.ttest_ind(stat_a, [r.statistic for r in b],
                                                               equal_var=False).pvalue)  # fmt: skip


def test_one_seed_on_a_shared_cut_is_the_binomial_interval(population):
    u, _ = population
    (run,) = scored(np.random.default_rng(4), u[:400], 1, 0.1, "cut")
    estimate = cell_estimate([run])
    p = run.values.mean()
    assert estimate.se == pytest.approx(np.sqrt(p * (1 - p) / 399))  # ddof=1: n - 1
    assert estimate.df == 399


def test_a_real_difference_is_separated(population):
    u, _ = population
    rng = np.random.default_rng(5)
    found = 0
    for _ in range(40):
        idx = rng.integers(0, u.size, 300)
        a, b = scored(rng, u[idx], 3, 0.1, "cut", shift=1.0), scored(rng, u[idx], 3, 0.1, "cut")
        found += pair_estimate(a, b, [0, 1, 2], [0, 1, 2]).p_value() < ALPHA
    assert found / 40 > 0.8


def test_stratified_statistic_is_the_mean_over_lengths():
    values = np.array([1, 1, 0, 0, 0, 1.0])
    run = RunOutcomes(np.arange(6), values, np.array([2, 2, 3, 3, 3, 3]), "f")
    assert run.statistic == pytest.approx((1.0 + 0.25) / 2)
