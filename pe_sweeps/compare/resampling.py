"""Two-stage bootstrap over seeds and evaluation examples: an interval for a cell's mean and a paired test
between two rows, from the runs' per-example outcomes (pe_sweeps/runs/outcomes.py), issue 44.1.

Why: a cell's mean over seeds varies with the seeds AND with the evaluation examples. A t test over the seeds'
aggregates sees only the first. When every seed is scored on one shared evaluation cut (PE-Study's `split_seed`,
a fixed `data.seed`), the cut's own sampling is the same for every seed: two encodings of equal population
accuracy that get different examples right differ on the cut identically for every seed, and a seed-only t test
"separates" them far more often than its alpha (tests/compare/test_resampling.py simulates it). Resampling the
examples too puts that sampling into the interval and the test.

The design resampled: stage 1 draws the seeds with replacement; stage 2 draws the examples with replacement
within each drawn seed's evaluation. When all runs evaluated the same examples (`shared=True`: the same ids and
the same `fingerprint` in their record's `outcomes`) stage 2 draws ONE set of example ids for all seeds (and,
in `paired_test`, both rows), since the examples are then a factor crossed with the seeds; otherwise each seed's
examples are drawn on their own.

Inputs: `runs`, a mapping {seed: (ids, values)}, one per run: its outcome table's `id` column and one value
column (`correct` as 0/1, `tok_acc`, `nll`, ...), e.g.

    table = outcome_table(record)                     # pe_sweeps.runs.outcomes
    runs[record.seed] = (table["id"], table["correct"])

All functions are vectorised numpy, with a fixed `seed`: the same inputs give the same interval.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

RESAMPLES = 2000
CONFIDENCE = 0.95

Runs = Mapping[object, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Interval:
    """A cell's mean over seeds and examples and its two-stage bootstrap percentile interval."""

    mean: float
    low: float
    high: float
    confidence: float
    seeds: int
    examples: int  # per seed (the shared cut's size, or the smallest evaluation)


@dataclass(frozen=True)
class PairedTest:
    """Row a's mean minus row b's over their shared examples, its interval and two-sided bootstrap p-value."""

    difference: float
    low: float
    high: float
    p_value: float
    confidence: float
    paired_seeds: bool  # the rows had the same seeds, drawn together


def cell_interval(runs: Runs, *, shared: bool, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                  seed: int = 0) -> Interval:  # fmt: skip
    """Two-stage bootstrap interval of a cell's mean (the mean over seeds of each seed's mean over its examples),
    studentised (`_studentised`: the draws' spread, t-calibrated for the few seeds; a plain percentile interval
    covered 62-83 % at 2-3 seeds when the seeds vary). `shared`: every run evaluated the same examples (same ids;
    check the records' outcome fingerprints), so one draw of example ids serves all seeds; else each seed's
    examples are drawn on their own."""
    rng = np.random.default_rng(seed)
    if shared:
        _, matrix = shared_matrix(runs)
        draws = _shared_means(
            matrix, _seed_counts(rng, len(matrix), resamples), _example_draws(rng, matrix.shape[1], resamples)
        )
        estimate, examples, seed_means = matrix.mean(), matrix.shape[1], matrix.mean(1)
    else:
        values = [np.asarray(v, dtype=np.float64) for _, (_, v) in sorted(_checked(runs).items(), key=_key)]
        counts = _seed_counts(rng, len(values), resamples)
        per_seed = np.stack([_resampled_means(rng, v, resamples) for v in values], axis=1)  # (B, S)
        draws = (counts * per_seed).sum(1) / len(values)
        seed_means = np.array([v.mean() for v in values])
        estimate, examples = float(seed_means.mean()), min(len(v) for v in values)
    low, high = _studentised(draws, float(estimate), seed_means, examples, confidence)
    return Interval(float(estimate), low, high, confidence, len(runs), examples)


def _studentised(draws: np.ndarray, estimate: float, seed_means: np.ndarray, examples: int,
                 confidence: float) -> tuple[float, float]:  # fmt: skip
    """estimate +- t_df SE: SE^2 the two-stage draws' variance plus var(seed means) / S^2 (the seed stage's bootstrap
    variance is (S-1)/S of the unbiased s^2/S: a percentile interval of 2-3 seeds covered 62-83 %, compare/coverage.py),
    df by Welch-Satterthwaite from the seed part (S-1 df) and the examples' part (N-1 df): Student's t on the seed
    means when seeds dominate, the normal interval when the examples do."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence}: must lie strictly between 0 and 1")
    seeds = len(seed_means)
    seed_part = float(np.var(seed_means, ddof=1)) / seeds if seeds > 1 else 0.0
    variance = float(np.var(draws)) + seed_part / seeds
    rest = max(variance - seed_part, 0.0)
    parts = (seed_part**2 / (seeds - 1) if seeds > 1 else 0.0) + rest**2 / max(examples - 1, 1)
    df = variance**2 / parts if parts > 0 else np.inf
    half = float(stats.t.ppf((1 + confidence) / 2, df)) * variance**0.5
    return estimate - half, estimate + half


def paired_test(runs_a: Runs, runs_b: Runs, *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                seed: int = 0) -> PairedTest:  # fmt: skip
    """Paired two-stage bootstrap of mean(a) - mean(b) for two rows evaluated on the same examples (every run of
    both rows has the same ids: check their outcome fingerprints). The examples are drawn once per resample for
    both rows; the seeds too when both rows have the same seeds (then seed s of a is paired with seed s of b),
    else each row's seeds on their own. p-value: the share of resampled differences at least as far from the
    observed one as the observed one is from 0 (the bootstrap distribution shifted to the null), two-sided."""
    ids_a, a = shared_matrix(runs_a)
    ids_b, b = shared_matrix(runs_b)
    if not np.array_equal(ids_a, ids_b):
        raise ValueError("the two rows evaluated different examples (their ids differ); a paired test needs one set")
    rng = np.random.default_rng(seed)
    examples = _example_draws(rng, a.shape[1], resamples)
    paired = sorted(runs_a, key=str) == sorted(runs_b, key=str)
    if paired:
        draws = _shared_means(a - b, _seed_counts(rng, len(a), resamples), examples)
    else:
        draws = _shared_means(a, _seed_counts(rng, len(a), resamples), examples)
        draws -= _shared_means(b, _seed_counts(rng, len(b), resamples), examples)
    observed = float(a.mean() - b.mean())
    low, high = _percentiles(draws, confidence)
    beyond = np.count_nonzero(np.abs(draws - observed) >= abs(observed))
    return PairedTest(observed, low, high, float((1 + beyond) / (1 + resamples)), confidence, paired)


def shared_matrix(runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    """(ids (N,), values (S, N)) of runs that evaluated the same examples, seeds in sorted order and each run's
    values ordered by id; ValueError naming the first run whose ids differ."""
    items = sorted(_checked(runs).items(), key=_key)
    ordered = []
    for run, (ids, values) in items:
        order = np.argsort(ids, kind="stable")
        ordered.append((run, np.asarray(ids)[order], np.asarray(values, dtype=np.float64)[order]))
    reference = ordered[0][1]
    for run, ids, _ in ordered[1:]:
        if not np.array_equal(ids, reference):
            raise ValueError(
                f"run {run!r} evaluated other examples than run {ordered[0][0]!r} ({len(ids)} vs {len(reference)} "
                "ids, or other ids); pass shared=False"
            )
    return reference, np.stack([values for _, _, values in ordered])


def _checked(runs: Runs) -> Runs:
    if not runs:
        raise ValueError("no runs to resample")
    for run, (ids, values) in runs.items():
        if len(ids) != len(values) or len(ids) == 0:
            raise ValueError(f"run {run!r}: {len(ids)} ids and {len(values)} values; need as many, at least one")
        if np.unique(ids).size != len(ids):
            raise ValueError(f"run {run!r}: an example id appears twice")
    return runs


def _key(item) -> str:
    return str(item[0])


def _seed_counts(rng: np.random.Generator, seeds: int, resamples: int) -> np.ndarray:
    """(B, S) how often each seed is drawn in each resample (S draws with replacement)."""
    drawn = rng.integers(0, seeds, size=(resamples, seeds))
    return (drawn[:, :, None] == np.arange(seeds)).sum(1)


def _example_draws(rng: np.random.Generator, examples: int, resamples: int) -> np.ndarray:
    """(B, N) indices of the examples drawn in each resample (N draws with replacement)."""
    return rng.integers(0, examples, size=(resamples, examples))


def _shared_means(matrix: np.ndarray, seed_counts: np.ndarray, example_draws: np.ndarray) -> np.ndarray:
    """(B,) means over the drawn seeds x drawn examples of a (S, N) matrix."""
    seeds, examples = matrix.shape
    resamples = len(example_draws)
    # how often each example is drawn in each resample: (B, N), by one bincount over the flattened draws
    offsets = (example_draws + examples * np.arange(resamples)[:, None]).ravel()
    drawn = np.bincount(offsets, minlength=resamples * examples).reshape(resamples, examples).astype(np.float64)
    # (B, S) each seed's mean over the drawn examples; einsum, not BLAS: faster for these thin shapes on a busy CPU
    per_seed = np.einsum("bn,sn->bs", drawn, matrix) / examples
    return (seed_counts * per_seed).sum(1) / seeds


def _resampled_means(rng: np.random.Generator, values: np.ndarray, resamples: int) -> np.ndarray:
    """(B,) means of one seed's values over its examples drawn with replacement."""
    return values[_example_draws(rng, len(values), resamples)].mean(1)


def _percentiles(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence}: must lie strictly between 0 and 1")
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)
