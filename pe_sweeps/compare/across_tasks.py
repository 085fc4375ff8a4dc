"""Aggregates over tasks x seeds as rliable reports them (Agarwal et al. 2021, "Deep Reinforcement Learning
at the Edge of the Statistical Precipice"): the interquartile mean (IQM) of every run's score with a
stratified-bootstrap interval, and the performance profile (the fraction of runs scoring past a threshold)
with its bootstrap band.

Re-implemented with numpy/scipy, following the definitions of rliable 1.2.0 exactly: `aggregate_iqm`
(rliable/metrics.py: `scipy.stats.trim_mean(scores, 0.25, axis=None)` over runs x tasks),
`StratifiedBootstrap` (rliable/library.py: runs are resampled with replacement within each task, tasks
are kept), `get_interval_estimates` (percentile interval, 50,000 resamples) and
`create_performance_profile` (score distribution `mean(scores > tau)` over all runs, 2,000 resamples).
The rliable package itself is not a dependency: it needs `arch<8`, whose releases fail to import under
pandas 3. Two generalisations: a task may have its own number of seeds (each is resampled within its
own), and for a metric to minimise the profile counts the runs below the threshold.
"""

import functools

import numpy as np
from scipy import stats

LEVEL = 0.95
IQM_RESAMPLES = 50_000  # rliable's get_interval_estimates default
PROFILE_RESAMPLES = 2_000  # rliable's create_performance_profile default
SEED = 0  # fixed: the same records always print the same interval
CHUNK = 2_000  # resamples drawn at once (bounded memory for many tasks x seeds)
# rliable's interval is a percentile bootstrap: with few seeds it covers less than its label, by how much depends
# on the table's shape (simulated on normal data: 51 % at 1 column x 2 seeds, 75 % at 1 x 3, 85 % at 4 x 3, 91 % at
# 4 x 5); `iqm_coverage` simulates the shape of the table at hand and the footer prints that level
IQM_INTERVAL = (
    f"rliable's nominal {LEVEL:.0%} stratified percentile bootstrap (Agarwal et al. 2021), seeds resampled within "
    f"each column, {IQM_RESAMPLES:,} resamples, RNG seed {SEED}"
)
# the IQM (and the performance profile) is an aggregate ACROSS tasks: over one or two columns it is a trimmed mean of
# a handful of runs of one or two tasks, not what rliable reports, and its percentile bootstrap covers 51 % at
# 1 column x 2 seeds, 75 % at 1 x 3 (85 % only from about 3-4 columns x 3 seeds); compare shows it from 3 columns
MIN_IQM_COLUMNS = 3
COVERAGE_ELEMENTS = 12_000_000  # draws x resamples x runs of one coverage simulation (about a second)


def iqm(scores) -> float:
    """Interquartile mean of every score (the 25 % trimmed mean over tasks x seeds, rliable's aggregate_iqm);
    `scores`: one array of seed values per task."""
    return float(stats.trim_mean(np.concatenate([np.asarray(s, dtype=float) for s in scores]), 0.25))


def stratified_resamples(scores, reps: int, rng: np.random.Generator):
    """Yield (k, total runs) arrays of bootstrap samples, k summing to reps: within each task its seeds are
    drawn with replacement, as many as it has (rliable's StratifiedBootstrap, task_bootstrap=False)."""
    arrays = [np.asarray(s, dtype=float) for s in scores]
    for start in range(0, reps, CHUNK):
        k = min(CHUNK, reps - start)
        yield np.concatenate([a[rng.integers(0, len(a), size=(k, len(a)))] for a in arrays], axis=1)


def percentile_interval(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail], axis=0)
    return low, high


def iqm_interval(scores, reps: int = IQM_RESAMPLES, seed: int = SEED) -> tuple[float, float, float]:
    """(IQM, low, high): the IQM over tasks x seeds and its stratified-bootstrap percentile interval."""
    rng = np.random.default_rng(seed)
    boot = np.concatenate([stats.trim_mean(s, 0.25, axis=1) for s in stratified_resamples(scores, reps, rng)])
    low, high = percentile_interval(boot)
    return iqm(scores), float(low), float(high)


def profile(values: np.ndarray, taus: np.ndarray, goal: str) -> np.ndarray:
    """The fraction of runs scoring past each threshold (above for a metric to maximise, below to minimise),
    over the last axis of values."""
    values = np.asarray(values, dtype=float)[..., None, :]
    past = values > taus[:, None] if goal == "max" else values < taus[:, None]
    return past.mean(axis=-1)


def performance_profile(scores, taus, goal: str = "max", reps: int = PROFILE_RESAMPLES, seed: int = SEED):
    """(profile, low, high) at each threshold in taus: rliable's score distribution over tasks x seeds and
    its stratified-bootstrap percentile band."""
    taus = np.asarray(taus, dtype=float)
    rng = np.random.default_rng(seed)
    boot = np.concatenate([profile(s, taus, goal) for s in stratified_resamples(scores, reps, rng)])
    low, high = percentile_interval(boot)
    point = profile(np.concatenate([np.asarray(s, dtype=float) for s in scores]), taus, goal)
    return point, low, high


@functools.lru_cache(maxsize=64)
def iqm_coverage(shape: tuple[int, ...], seed: int = SEED) -> float:
    """The real coverage of `iqm_interval` at a table's shape (seeds per column), simulated once per shape (cached)
    on normal data with a fixed seed: every column N(0, 1), whose IQM is 0; the fraction of draws whose stratified
    percentile-bootstrap interval holds 0, with 1,000 resamples each. The draws (200 to 1,000) shrink with the
    number of runs so that one shape takes about a second; the level is good to about two points."""
    reps = 1000
    draws = max(200, min(1000, COVERAGE_ELEMENTS // (reps * sum(shape))))
    rng = np.random.default_rng(seed)
    return bootstrap_coverage(shape, rng.standard_normal, 0.0, draws, reps, rng)


def bootstrap_coverage(shape: tuple[int, ...], sample, truth: float, draws: int, reps: int,
                       rng: np.random.Generator) -> float:  # fmt: skip
    """The fraction of `draws` tables (seeds per column: `shape`, each column's seeds `sample(size)`) whose
    stratified percentile-bootstrap IQM interval (`reps` resamples) holds `truth`: the simulation behind
    `iqm_coverage` and compare/coverage.py."""
    tail = (1 - LEVEL) / 2 * 100
    hits = 0
    for start in range(0, draws, 100):
        k = min(100, draws - start)
        parts = []
        for n in shape:  # per column: k draws of n seeds, each resampled reps times within the column
            values = np.broadcast_to(sample((k, 1, n)), (k, reps, n))
            parts.append(np.take_along_axis(values, rng.integers(0, n, (k, reps, n)), axis=-1))
        boot = stats.trim_mean(np.concatenate(parts, axis=-1), 0.25, axis=-1)
        low, high = np.percentile(boot, [tail, 100 - tail], axis=-1)
        hits += int(((low <= truth) & (high >= truth)).sum())
    return hits / draws
