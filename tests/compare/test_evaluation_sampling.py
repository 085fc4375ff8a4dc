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
- "on a shared cut the interval adds the examples' term (the binomial variance of the per-example means) to the
  seeds'": test_two_seeds_on_a_shared_cut_add_the_binomial_term; "one seed gets no interval":
  test_a_single_seed_gets_no_interval
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


@pytest.mark.parametrize("seeds, seed_sd", [(3, 0.03), (5, 0.03), (3, 0.5), (5, 0.5), (2, 1.0)])
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
    a = scored(rng, u[:300], 4, 0.8, "x", shared=False)
    b = scored(rng, u[:300], 4, 0.8, "x", shift=0.5, shared=False)
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


def test_two_seeds_on_a_shared_cut_add_the_binomial_term(population):
    u, _ = population
    runs = scored(np.random.default_rng(4), u[:400], 2, 0.1, "cut")
    estimate = cell_estimate(runs)
    (seed_var, seed_df), (example_var, example_df) = estimate.parts
    m = np.mean([r.values for r in runs], axis=0)
    assert example_var == pytest.approx(m.var(ddof=1) / 400) and example_df == 399
    assert seed_var == pytest.approx(np.var([r.statistic for r in runs], ddof=1) / 2) and seed_df == 1


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


def outcome_runs(tmp_path, shared: bool) -> list:
    """2 encodings x 3 seeds of a classifier-like task with per-example outcomes on disk (runs/outcomes.py), one
    evaluation cut shared by every run (`shared`) or one cut per seed; rope ahead of alibi by ~10 points."""
    from pe_sweeps.runs.outcomes import write_table
    from pe_sweeps.runs.records import RunRecord

    rng, records = np.random.default_rng(7), []
    for encoding, shift in (("rope", 1.0), ("alibi", 0.4)):
        for seed in range(3):
            cut = 0 if shared else seed
            ease = np.random.default_rng(cut).normal(0, 2.0, 240)
            correct = rng.random(240) < sigmoid(shift + ease + rng.normal(0, 0.1))
            hashes = np.arange(240, dtype=np.int64) + 1000 * cut  # the examples' content: one cut, one content
            run_dir = tmp_path / f"{encoding}-{seed}"
            table = {"id": np.arange(240), "hash": hashes, "correct": correct, "nll": rng.random(240)}
            pointer = write_table(run_dir, "val", 100, table)
            final = {"val/acc": float(correct.mean()), "val/loss": float(table["nll"].mean())}
            records.append(RunRecord(
                name=f"cls-{encoding}-s{seed}", task="cls", encoding=encoding, seed=seed, status="finished",
                subcommand="fit", config={"seed_everything": seed, "model": {"class_path": "C"}, "data": {}},
                final=final, best=final, history=[{"step": 100, **final}], outcomes={"val": pointer},
                run_dir=str(run_dir),
            ))  # fmt: skip
    return records


@pytest.mark.parametrize("shared", [True, False])
def test_compare_json_holds_the_interval_over_seeds_and_examples(tmp_path, shared):
    import json

    from pe_sweeps.compare.render import to_json
    from pe_sweeps.compare.statistics import compare

    records = outcome_runs(tmp_path, shared)
    data = json.loads(to_json(compare(records, "val/acc")))
    assert {c["ci_method"] for c in data["cells"]} == {"seeds+examples"}
    assert {c["ci_design"] for c in data["cells"]} == {"shared cut" if shared else "independent cuts"}
    (pair,) = data["pairs"]["cls"]
    assert pair["test"].startswith("t-test over seeds and examples (" + ("shared cut, paired by seed" if shared
                                                                         else "paired by seed"))  # fmt: skip
    assert pair["verdict"] in ("better", "inconclusive") and data["protocol"]["family_size"] == 1
    assert "evaluation examples" in data["interval"] and "evaluation_sampling" in data["protocol"]["test"]
    seeds_only = json.loads(to_json(compare(records, "val/acc", interval="seeds")))
    assert {c["ci_method"] for c in seeds_only["cells"]} == {"seeds"}
    assert seeds_only["pairs"]["cls"][0]["test"] == "Welch t-test over seeds"


def test_outcomes_that_do_not_reproduce_the_logged_value_are_not_used(tmp_path):
    from pe_sweeps.compare.statistics import compare

    records = outcome_runs(tmp_path, True)
    records[0].final["val/acc"] += 0.01  # another evaluation than the one its outcomes hold
    comp = compare(records, "val/acc")
    assert comp.cells["rope", "cls"].sampling is None and comp.cells["alibi", "cls"].sampling is not None
    assert "in 1 of 2 cells" in comp.interval
    assert comp.pairs["cls"][0]["test"] == "Welch t-test over seeds"


def test_a_single_seed_gets_no_interval(tmp_path):
    """One seed on one cut: the cut's binomial interval covers the mean over seeds only 41-71 % when the seeds'
    spread matters (benchmarks/coverage_table.py), so a cell of one seed gets none, as over seeds only."""
    from pe_sweeps.compare.statistics import compare

    records = [r for r in outcome_runs(tmp_path, True) if r.seed == 0]
    comp = compare(records, "val/acc")
    assert comp.cells["rope", "cls"].sampling is None and np.isnan(comp.cells["rope", "cls"].ci[0])
    assert comp.pairs["cls"][0]["verdict"] == "not testable"


def test_an_unknown_interval_is_one_line(tmp_path):
    from pe_core.errors import ConfigError
    from pe_sweeps.compare.statistics import compare

    with pytest.raises(ConfigError, match=r"--interval 'boot'; choose one of: seeds\+examples, seeds"):
        compare(outcome_runs(tmp_path, True), "val/acc", interval="boot")


def test_a_token_weighted_mean_is_linearised():
    """A language model's val/loss is sum(tokens * nll) / sum(tokens): the linearised values have that mean, and the
    variance of their mean is the ratio estimator's (the delta method), checked against the closed form."""
    from pe_sweeps.compare.evaluation_sampling import token_weighted

    rng = np.random.default_rng(9)
    tokens, nll = rng.integers(0, 40, 500).astype(float), rng.gamma(3.0, 1.0, 500)
    z = token_weighted(nll, tokens)
    theta = (tokens * nll).sum() / tokens.sum()
    assert z.mean() == pytest.approx(theta)
    residual = tokens * (np.where(tokens > 0, nll, theta) - theta)
    assert z.var(ddof=1) / 500 == pytest.approx(residual.var(ddof=1) / tokens.mean() ** 2 / 500)


def test_seeds_that_tie_are_not_certainty():
    """Two seeds whose differences tie exactly (a discrete accuracy; seen on real copy runs: rope - sinusoidal =
    0.3073 on both seeds) gave se ~1e-17 and p ~1e-16: the standard error is at least the examples' own."""
    a = [RunOutcomes(np.arange(96), np.r_[np.ones(34), np.zeros(62)], np.zeros(96, int), f"{s}") for s in (0, 1)]
    a[1] = RunOutcomes(np.arange(96), np.r_[np.ones(31), np.zeros(65)], np.zeros(96, int), "1")
    b = [RunOutcomes(np.arange(96), np.r_[np.zeros(91), np.ones(5)], np.zeros(96, int), "0"),
         RunOutcomes(np.arange(96), np.r_[np.zeros(94), np.ones(2)], np.zeros(96, int), "1")]  # fmt: skip
    paired = pair_estimate(a, b, [0, 1], [0, 1])
    assert paired.design == "paired by seed" and paired.se > 0.03 and paired.p_value() > 0.01
    assert cell_estimate(a).se >= np.sqrt(0.34 * 0.66 / 95 / 2) * 0.9
