"""What every interval and pair test of `cli.py compare` really covers, before and after issue 44 (point 4).

To run: nice python benchmarks/coverage_table.py [--quick]   (the full tables take several minutes on 2 cores)

Prints five markdown tables (a docs page can paste them), each a fixed-seed simulation:

1. the mean's Student-t interval over seeds: its real coverage and the level the table prints, before (always
   "95 %") and after (the cell's real level from compare/coverage.py's `mean_level`, printed when more than 2
   points off; the median over simulated cells, with the middle half of cells), at five shapes of seed values
   (normal; Beta(0.3, 5) and Beta(50, 1), accuracies near 0 and 1; lognormal(1), a loss; t with 3 df) x n seeds;
2. the median's order-statistic interval on the same grid (after: its exact binomial level when > 2 points off);
3. rliable's IQM interval across columns at a few table shapes (after: the footer's level, simulated for the
   shape on normal data, across_tasks.iqm_coverage);
4. a cell's interval over seeds AND evaluation examples (evaluation_sampling.cell_estimate, the new default when
   runs kept per-example outcomes) against the seed-only t interval, on one evaluation cut shared by every seed
   and on a cut per seed, at three mixes of seed and example variance;
5. false separations of two encodings of equal population accuracy that get different examples right, scored on
   one cut shared by every seed and both rows (the fixed-evaluation-set finding): the old default test (Welch
   over seeds) against the new (evaluation_sampling.pair_estimate, p < 0.05), and both tests' power at a real
   difference of population accuracy.

The model of tables 4 and 5 (as in tests/compare/test_evaluation_sampling.py): a run of seed s gets example i
right with probability sigmoid(BASE + shift + e_i + a_s + j_si), e_i ~ N(0, EASE) the example's ease (encoding b's
an independent draw: it gets other examples right), a_s ~ N(0, seed sd), j_si ~ N(0, JITTER).
Every coverage or rate p over R draws has a Monte Carlo standard error sqrt(p (1 - p) / R); each table states R
and the largest such error in it.
"""

import argparse
import math
import time
import warnings

import numpy as np
from scipy import optimize, special, stats

from pe_sweeps.compare.across_tasks import iqm_coverage
from pe_sweeps.compare.comparison import LEVEL, Cell
from pe_sweeps.compare.coverage import iqm_shape_coverage, mean_coverage, median_coverage, t_interval
from pe_sweeps.compare.evaluation_sampling import RunOutcomes, cell_estimate, pair_estimate

UNBOUNDED = (-math.inf, math.inf)
SHAPES = {  # name: (distribution of the seed values, the metric's range)
    "normal": (stats.norm(0.0, 1.0), UNBOUNDED),
    "Beta(0.3,5)": (stats.beta(0.3, 5), (0.0, 1.0)),
    "Beta(50,1)": (stats.beta(50, 1), (0.0, 1.0)),
    "lognormal": (stats.lognorm(1.0), (0.0, math.inf)),
    "t(3 df)": (stats.t(3), UNBOUNDED),
}
NS = (2, 3, 5, 10)
IQM_SHAPES = {"1x3": (3,), "4x3": (3,) * 4, "10x2": (2,) * 10, "10x3": (3,) * 10, "10x10": (10,) * 10}
IQM_DISTS = ("normal", "Beta(0.3,5)", "lognormal")

BASE, EASE, JITTER = 0.8, 3.0, 0.2  # the evaluation-sampling model (module docstring)
EXAMPLES = 200  # table 4's evaluation cut
SEED_SDS = (0.03, 0.5, 1.0)  # seed logit sd: the examples dominate / the seeds dominate / the seeds dominate more
CELL_SEEDS = (1, 2, 3, 5, 10)
PAIR_CUTS = (200, 960)
PAIR_SEEDS = (3, 5)
PAIR_SEED_SDS = (0.03, 0.5)
DIFFERENCES = (0.05, 0.10)  # real differences of population accuracy (power)
ALPHA = 0.05

FULL = {"reps": 100_000, "cells": 2_000, "ns": NS, "iqm_draws": 2_000, "iqm_resamples": 1_000,
        "iqm_shapes": tuple(IQM_SHAPES), "iqm_dists": IQM_DISTS, "cell_draws": 2_000, "seed_sds": SEED_SDS,
        "cell_seeds": CELL_SEEDS, "pair_draws": 2_000, "pair_cuts": PAIR_CUTS, "pair_seeds": PAIR_SEEDS,
        "pair_seed_sds": PAIR_SEED_SDS}  # fmt: skip
# a smoke test of every table (tests/compare/test_coverage_benchmark.py), not a measurement
QUICK = {"reps": 2_000, "cells": 20, "ns": (2, 3), "iqm_draws": 20, "iqm_resamples": 100, "iqm_shapes": ("1x3",),
         "iqm_dists": ("lognormal",), "cell_draws": 10, "seed_sds": (0.03, 1.0), "cell_seeds": (1, 3),
         "pair_draws": 10, "pair_cuts": (200,), "pair_seeds": (3,), "pair_seed_sds": (0.03,)}  # fmt: skip


def pct(p: float) -> str:
    return "-" if p is None or math.isnan(p) else f"{100 * p:.1f} %"


def mc_se(p: float, reps: int) -> float:
    """Monte Carlo standard error of a proportion p over reps draws."""
    return math.sqrt(p * (1 - p) / reps)


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    """A pipe table (mkdocs renders it; it reads as plain text too)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(x) for x in row) + " |" for row in rows])


def footer(reps: int, proportions: list[float], what: str = "coverage") -> str:
    worst = max((mc_se(p, reps) for p in proportions if p is not None and not math.isnan(p)), default=0.0)
    return f"Monte Carlo: {reps:,} draws per {what}; standard error at most {100 * worst:.2f} points in this table."


# --- tables 1 and 2: the seed-only intervals of one cell -------------------------------------------------------


def printed_levels(shape: str, n: int, aggregate: str, cells: int) -> np.ndarray:
    """The level `Cell.interval` prints for `cells` cells of n values drawn from the shape (the 'after')."""
    dist, bounds = SHAPES[shape]
    values = dist.rvs(size=(cells, n), random_state=np.random.default_rng([n, cells]))
    return np.array([Cell([{}] * n, list(v), aggregate, bounds=bounds).interval.level for v in values])


def seed_interval_table(aggregate: str, cfg: dict) -> str:
    coverage = mean_coverage if aggregate == "mean" else median_coverage
    rows, reals, median_se = [], [], 0.0
    for shape, (dist, _) in SHAPES.items():
        for n in cfg["ns"]:
            real = coverage(dist, n, cfg["reps"])
            levels = printed_levels(shape, n, aggregate, cfg["cells"])
            q25, q50, q75 = np.quantile(levels, [0.25, 0.5, 0.75])
            median_se = max(median_se, 1.25 * float(np.std(levels)) / math.sqrt(len(levels)))  # a median's se
            after = pct(q50) if q25 == q75 else f"{pct(q50)} ({pct(q25)} to {pct(q75)})"
            rows.append([shape, n, pct(real), pct(LEVEL), after, f"{100 * (q50 - real):+.1f}"])
            reals.append(real)
    headers = ["shape", "n seeds", "real coverage", "before: prints", "after: prints (median (middle half))",
               "after - real (points)"]  # fmt: skip
    note = (f"After: the level printed for each of {cfg['cells']:,} simulated cells per row (its median, and the "
            f"middle half of cells where they differ).")  # fmt: skip
    spread = f" The median printed level's standard error: at most {100 * median_se:.2f} points."
    return "\n".join([markdown(headers, rows), "", note, footer(cfg["reps"], reals) + spread])


# --- table 3: rliable's IQM interval ------------------------------------------------------------------------------


def iqm_table(cfg: dict) -> str:
    rows, reals = [], []
    for name in cfg["iqm_dists"]:
        for label in cfg["iqm_shapes"]:
            shape = IQM_SHAPES[label]
            real = iqm_shape_coverage(SHAPES[name][0], shape, cfg["iqm_draws"], cfg["iqm_resamples"])
            printed = iqm_coverage(shape)
            rows.append([name, label, pct(real), pct(LEVEL), pct(printed), f"{100 * (printed - real):+.1f}"])
            reals.append(real)
    headers = ["shape", "columns x seeds", "real coverage", "before: prints", "after: prints", "after - real (points)"]
    note = (
        f"{cfg['iqm_resamples']:,} bootstrap resamples per simulated table (the command uses 50,000); after: "
        f"across_tasks.iqm_coverage, the footer's level, simulated for the table's shape on normal data."
    )
    return "\n".join([markdown(headers, rows), "", note, footer(cfg["iqm_draws"], reals)])


# --- tables 4 and 5: the evaluation set's own sampling ------------------------------------------------------------


def population_accuracy(seed_sd: float, shift: float = 0.0) -> float:
    """E sigmoid(BASE + shift + sqrt(EASE^2 + seed_sd^2 + JITTER^2) Z) (Gauss-Hermite quadrature)."""
    x, w = np.polynomial.hermite_e.hermegauss(120)
    scale = math.sqrt(EASE**2 + seed_sd**2 + JITTER**2)
    return float((special.expit(BASE + shift + scale * x) * w).sum() / w.sum())


def seed_share(seed_sd: float, examples: int) -> float:
    """The seeds' share of the variance of one run's accuracy on `examples` examples: Var_a p(a) against
    Var_a p(a) + E_a p(a) (1 - p(a)) / examples, p(a) the population accuracy of a model of seed effect a."""
    x, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    inner = math.hypot(EASE, JITTER)
    p = np.array([(special.expit(BASE + seed_sd * a + inner * x) * w).sum() for a in x])
    seeds = float((w * (p - (w * p).sum()) ** 2).sum())
    return seeds / (seeds + float((w * p * (1 - p)).sum()) / examples)


def scored(rng: np.random.Generator, ease: np.ndarray, seed_sd: float, fingerprints: list[str],
           shift: float = 0.0) -> list[RunOutcomes]:  # fmt: skip
    """One row's runs, one per fingerprint: 0/1 outcomes on examples of ease `ease` (seeds x examples, or one
    row of examples shared by every seed)."""
    seeds, examples = len(fingerprints), ease.shape[-1]
    logit = BASE + shift + ease + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, JITTER, (seeds, examples))
    y = (rng.random((seeds, examples)) < special.expit(logit)).astype(float)
    ids, strata = np.arange(examples), np.zeros(examples, dtype=np.int64)
    return [RunOutcomes(ids, y[s], strata, f) for s, f in enumerate(fingerprints)]


def cell_coverage(seeds: int, seed_sd: float, shared: bool, draws: int) -> tuple[float, float]:
    """(seeds+examples, seed-only t) coverage of the population accuracy by one cell of `seeds` runs on EXAMPLES
    examples: one cut shared by every seed, or a cut per seed; the seed-only t needs 2 seeds (NaN below)."""
    rng = np.random.default_rng([4, seeds, int(seed_sd * 100), int(shared)])
    truth = population_accuracy(seed_sd)
    new, statistics = 0, np.empty((draws, seeds))
    for d in range(draws):
        ease = rng.normal(0, EASE, (1 if shared else seeds, EXAMPLES))
        runs = scored(rng, ease, seed_sd, ["cut" if shared else f"cut{s}" for s in range(seeds)])
        found = cell_estimate(runs)  # None for one seed: the cell gets no interval
        low, high = found.interval(LEVEL) if found is not None else (math.nan, math.nan)
        new += low <= truth <= high
        statistics[d] = [r.statistic for r in runs]
    if seeds < 2:
        return math.nan, math.nan
    low, high = t_interval(statistics)
    return new / draws, float(np.mean((low <= truth) & (truth <= high)))


def cell_table(cfg: dict) -> str:
    draws, rows, seen = cfg["cell_draws"], [], []
    for seed_sd in cfg["seed_sds"]:
        share = seed_share(seed_sd, EXAMPLES)
        for seeds in cfg["cell_seeds"]:
            shared_new, shared_t = cell_coverage(seeds, seed_sd, True, draws)
            cuts_new, cuts_t = cell_coverage(seeds, seed_sd, False, draws)
            rows.append([seed_sd, pct(share), seeds, pct(shared_new), pct(shared_t), pct(cuts_new), pct(cuts_t)])
            seen += [shared_new, shared_t, cuts_new, cuts_t]
    headers = [
        "seed logit sd",
        "seeds' share of a run's variance",
        "seeds",
        "shared cut: seeds+examples (new)",
        "shared cut: seed-only t (old)",
        "cut per seed: seeds+examples (new)",
        "cut per seed: seed-only t (old)",
    ]
    note = (
        f"Coverage of the population accuracy (over seeds and examples), nominal {LEVEL:.0%}; "
        f"{EXAMPLES} examples per cut, example ease sd {EASE} and seed x example jitter sd "
        f"{JITTER} on the logit, population accuracy {population_accuracy(0.5):.3f} (seed sd 0.5). One seed on a "
        f"cut per seed is one run on one cut: the same design as a shared cut (its binomial interval)."
    )
    return "\n".join([markdown(headers, rows), "", note, footer(draws, seen, "coverage or rate")])


def shift_for(difference: float, seed_sd: float) -> float:
    """The logit shift of encoding a that makes its population accuracy `difference` above b's."""
    target = population_accuracy(seed_sd) + difference
    return float(optimize.brentq(lambda s: population_accuracy(seed_sd, s) - target, -5.0, 5.0))


def separations(examples: int, seeds: int, seed_sd: float, difference: float, draws: int) -> tuple[float, float]:
    """(old, new): the share of draws in which Welch over seeds, and evaluation_sampling.pair_estimate, give
    p < ALPHA for a - b, both rows' seeds scored on one cut shared by all; a's population accuracy `difference`
    above b's (0: equal populations, every separation false)."""
    rng = np.random.default_rng([5, examples, seeds, int(seed_sd * 100), int(difference * 1000)])
    shift = shift_for(difference, seed_sd) if difference else 0.0
    names, fingerprints = list(range(seeds)), ["cut"] * seeds
    old = new = 0
    for _ in range(draws):
        ease_a, ease_b = rng.normal(0, EASE, (2, 1, examples))  # b gets other examples right
        a = scored(rng, ease_a, seed_sd, fingerprints, shift)
        b = scored(rng, ease_b, seed_sd, fingerprints)
        with warnings.catch_warnings():  # identical seed values: NaN p, never a separation
            warnings.simplefilter("ignore", RuntimeWarning)
            welch = stats.ttest_ind([r.statistic for r in a], [r.statistic for r in b], equal_var=False).pvalue
        old += welch < ALPHA
        new += pair_estimate(a, b, names, names).p_value() < ALPHA
    return old / draws, new / draws


def pair_table(cfg: dict) -> str:
    draws, rows, seen = cfg["pair_draws"], [], []
    for examples in cfg["pair_cuts"]:
        for seeds in cfg["pair_seeds"]:
            for seed_sd in cfg["pair_seed_sds"]:
                row = [examples, seeds, seed_sd]
                for difference in (0.0, *DIFFERENCES):
                    old, new = separations(examples, seeds, seed_sd, difference, draws)
                    row += [pct(old), pct(new)]
                    seen += [old, new]
                rows.append(row)
    headers = ["cut (examples)", "seeds", "seed logit sd", "false separations: Welch over seeds (old)",
               "false separations: seeds+examples (new)"]  # fmt: skip
    for difference in DIFFERENCES:
        headers += [f"power at +{difference:.2f}: old", f"power at +{difference:.2f}: new"]
    note = (
        f"Two encodings of equal population accuracy ({population_accuracy(0.03):.3f} at seed sd 0.03) that get "
        f"different examples right (independent example eases), every seed of both rows scored on one shared cut; "
        f"separated: p < {ALPHA} (two-sided). Power: encoding a's population accuracy raised by the difference "
        f"(a logit shift). The new test pairs the rows by seed and by example (same seed names)."
    )
    return "\n".join([markdown(headers, rows), "", note, footer(draws, seen, "rate")])


TABLES = {
    "1. Student-t interval of the mean over seeds": lambda cfg: seed_interval_table("mean", cfg),
    "2. order-statistic interval of the median over seeds": lambda cfg: seed_interval_table("median", cfg),
    "3. rliable's IQM interval across columns": iqm_table,
    "4. a cell's interval: seeds+examples (new default) vs seed-only t (old)": cell_table,
    "5. false separations and power on one shared evaluation cut": pair_table,
}


def main(argv: list[str] | None = None) -> None:
    """Print every table (the full simulation, or a smoke version with --quick)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few draws per case: a smoke test, not a measurement")
    parser.add_argument("--tables", default=None, help="which tables, e.g. 4,5 (default: all)")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    start = time.perf_counter()
    chosen = None if args.tables is None else {int(k) for k in args.tables.split(",")}
    for number, (title, table) in enumerate(TABLES.items(), 1):
        if chosen is not None and number not in chosen:
            continue
        began = time.perf_counter()
        print(f"### {title}\n\n{table(cfg)}\n({time.perf_counter() - began:.0f} s)\n", flush=True)
    print(f"{'quick' if args.quick else 'full'} run, {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
