"""Issue 44: verdicts of `cli.py compare` that survive a hostile reviewer. Every pair of rows in a column gets a
verdict under a declared protocol (better / worse / equivalent within a declared margin / inconclusive), Holm over
one declared family (every pair x column x metric, or a --primary metric's), perplexity tested on the log scale,
the IQM footer's real coverage at the table's shape, and selection on a beyond-training-length metric refused
unless allowed (and then labelled).

Claims of docs/compare.md covered here:
- "better / worse (Holm p < alpha), equivalent within +-m (TOST, margin declared in the sweep file's `compare:` or
  with --margin), otherwise inconclusive; no margin, no equivalence verdict": test_each_pair_gets_a_declared_verdict,
  test_the_margin_is_declared_in_the_sweep_file_or_with_margin, test_a_sweep_files_compare_block_is_checked
- "Holm over one family, its size printed; --primary: the rest exploratory":
  test_holm_over_the_family_keeps_the_family_wise_error_at_alpha, test_primary_metric_makes_the_rest_exploratory
- "perplexity is tested on the log scale": test_perplexity_is_tested_on_the_log_scale
- "the IQM footer prints its interval's real coverage at the table's shape":
  test_the_iqm_footer_states_its_real_coverage
- "--value best (or --best-over) on a beyond-training-length metric is refused unless --allow_ood_selection":
  test_selection_on_a_beyond_training_length_metric_is_refused_unless_allowed
"""

import io
import itertools
import json
import math

import numpy as np
import pytest
import yaml
from helpers import record as make_record
from rich.console import Console
from scipy import stats

from pe_core.errors import ConfigError
from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.comparison import Cell, notes
from pe_sweeps.compare.render import render_table, to_json, to_latex, to_markdown
from pe_sweeps.compare.statistics import compare, compare_metrics, holm_array, pair_test
from pe_sweeps.runs.manifest import write_manifest
from pe_sweeps.runs.records import write_record
from pe_sweeps.sweep import sweep_file as sf

ALPHA = 0.05
SWEEP = {"program": "cli.py", "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
         "parameters": {"model.arch.encoding": {"values": ["rope", "alibi"]}},
         "command": ["${env}", "${interpreter}", "${program}", "fit", "${args}"]}  # fmt: skip


def rec(encoding: str, task: str, seed: int, metrics: dict, sweep: str | None = None):
    """A finished run of `encoding` on `task` with these final (and best) metrics, trained up to length 4."""
    config = {
        "seed_everything": seed,
        "trainer": {"max_steps": 100},
        "model": {"class_path": "M", "init_args": {"arch": {"encoding": encoding}, "lr": 1e-3}},
        "data": {"class_path": "D", "init_args": {"task": task, "train_max_len": 4, "block_size": 128}},
    }
    return make_record(name=f"{task}-{encoding}-s{seed}", group=f"{task}/{encoding}", task=task, encoding=encoding,
                       seed=seed, sweep=sweep, subcommand="fit", status="finished", config=config, final=metrics,
                       best={k: v + 0.01 for k, v in metrics.items()}, history=[], updated_at=1.0,
                       run_dir=f"out/runs/{task}-{encoding}-s{seed}")  # fmt: skip


def runs(values: dict, metric: str = "val/acc", sweep: str | None = None) -> list:
    """{(encoding, task): [value per seed]} -> records."""
    return [rec(e, t, s, {metric: v}, sweep) for (e, t), vs in values.items() for s, v in enumerate(vs)]


def text_of(renderable) -> str:
    console = Console(file=io.StringIO(), width=250, record=True)
    console.print(renderable)
    return console.export_text()


def write_records(root, records) -> None:
    for i, record in enumerate(records):
        write_record(root / "runs" / f"run-{i}" / "record.json", record)


@pytest.mark.parametrize(
    "a, b, margin, expected",
    [
        ([0.90, 0.91, 0.92], [0.50, 0.52, 0.51], None, "rope better than alibi"),
        ([0.800, 0.801, 0.802, 0.800, 0.801], [0.8005, 0.8012, 0.8008, 0.8, 0.8011], 0.01,
         "rope equivalent to alibi within ±0.01"),
        ([0.800, 0.801, 0.802, 0.800, 0.801], [0.8005, 0.8012, 0.8008, 0.8, 0.8011], None, "inconclusive"),
        ([0.9, 0.5, 0.7], [0.6, 0.8, 0.4], 0.01, "inconclusive"),  # noisy: neither different nor within ±0.01
    ],
)  # fmt: skip
def test_each_pair_gets_a_declared_verdict(a, b, margin, expected):
    """Point 2: 'not separated' is not a result. Each pair is better / worse, equivalent within a declared margin
    (TOST at the same alpha), or inconclusive; without a margin there is no equivalence verdict, as the legend says."""
    records = runs({("rope", "copy"): a, ("alibi", "copy"): b})
    comps = compare_metrics(records, ["val/acc"], margins={"*": margin} if margin else None, margin_source="test")
    (pair,) = comps[0].pairs["copy"]
    assert expected in comps[0].tests["copy"] and pair["verdict"] in expected
    legend = "\n".join(text_of(render_table(comps)).split())
    assert "Welch t-test over seeds" in " ".join(legend.split()) and "alpha 0.05" in " ".join(legend.split())
    shown = " ".join(legend.split())
    if margin:
        assert "equivalent: within ±0.01 by TOST" in shown
    else:
        assert "no equivalence margin (--margin M)" in shown and "separated" not in shown


def test_the_margin_is_declared_in_the_sweep_file_or_with_margin(tmp_path, capsys):
    """The margin comes from the sweep file's `compare: {margin: M}` (through the study's manifest), or --margin
    on the command line, which the output names; a bad --margin is one line."""
    sweep = {**SWEEP, "compare": {"margin": 0.01}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    write_manifest(tmp_path, "s", sf.load_sweep(path), path, "sqlite:///x.db")
    same = [0.800, 0.801, 0.802, 0.800, 0.801]
    write_records(tmp_path, runs({("rope", "copy"): same, ("alibi", "copy"): [v + 0.0004 for v in same]}, sweep="s"))
    compare_main([f"--out_dir={tmp_path}", "--sweep=s", "--format=json"])
    data = json.loads(capsys.readouterr().out)
    assert data["protocol"]["margin"] == 0.01 and data["protocol"]["margin_source"] == "in the sweep file"
    assert data["pairs"]["copy"][0]["verdict"] == "equivalent"
    compare_main([f"--out_dir={tmp_path}", "--sweep=s", "--format=json", "--margin=val/acc=0.0001"])
    data = json.loads(capsys.readouterr().out)
    assert (
        data["protocol"]["margin"] == 0.0001
        and data["protocol"]["margin_source"] == "with --margin on the command line"
    )
    assert data["pairs"]["copy"][0]["verdict"] == "inconclusive"
    with pytest.raises(ConfigError, match=r"^--margin '-1': an equivalence margin is a positive number \(e.g. 0.01\)$"):
        compare_main([f"--out_dir={tmp_path}", "--sweep=s", "--margin=-1"])
    with pytest.raises(
        ConfigError, match=r"^margin for 'val/nope' \(with --margin on the command line\): not a metric shown"
    ):
        compare_main([f"--out_dir={tmp_path}", "--sweep=s", "--margin=val/nope=0.1"])


@pytest.mark.parametrize(
    "block, message",
    [
        ({"margin": -0.1}, "compare.margin -0.1: an equivalence margin is a positive number"),
        ({"margin": "small"}, "compare.margin 'small': an equivalence margin is a positive number"),
        ({"margin": True}, "compare.margin True: an equivalence margin is a positive number"),
        ({"margin": float("inf")}, "compare.margin inf: an equivalence margin is a positive number"),
        ({"margin": {"val/acc": 0}}, "compare.margin.val/acc 0: an equivalence margin is a positive number"),
        ({"alpha": 0.1}, "compare key 'alpha' is unknown; known: margin, precondition, primary"),
        ({"primary": 3}, "compare.primary must name a metric, got 3"),
        ([0.01], "compare must be a mapping with keys margin, precondition, primary"),
    ],
)
def test_a_sweep_files_compare_block_is_checked(tmp_path, block, message):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SWEEP, "compare": {"margin": {"val/acc": 0.01}, "primary": "val/acc"}}))
    assert sf.load_sweep(path)["compare"]["margin"] == {"val/acc": 0.01}  # W&B's schema check skips our own key
    path.write_text(yaml.safe_dump({**SWEEP, "compare": block}))
    with pytest.raises(ConfigError, match="^sweep file .*: " + message.replace("(", r"\(").replace(")", r"\)")):
        sf.load_sweep(path)


def null_pvalues(draws: int, columns: int, rows: int, seeds: int, seed: int = 0) -> np.ndarray:
    """(draws, columns, pairs) Welch p-values of every pair of rows in each column, every value N(0, 1)."""
    values = np.random.default_rng(seed).standard_normal((draws, columns, rows, seeds))
    first, second = zip(*itertools.combinations(range(rows), 2))
    return stats.ttest_ind(values[:, :, list(first)], values[:, :, list(second)], axis=-1, equal_var=False).pvalue


def test_holm_over_the_family_keeps_the_family_wise_error_at_alpha():
    """Point 3: under the null (every row alike), Holm within each column lets 8 columns x 15 pairs at 5 seeds
    claim a difference in about 21 % of tables; Holm over the whole family, as compare now does, in at most
    alpha (+ 2 points of simulation error)."""
    p = null_pvalues(draws=4000, columns=8, rows=6, seeds=5)
    within_one_column = (holm_array(p[:, 0]) < ALPHA).any(axis=-1).mean()
    within_columns = (holm_array(p) < ALPHA).any(axis=(-1, -2)).mean()  # the old protocol over 8 columns
    family = (holm_array(p.reshape(len(p), -1)) < ALPHA).any(axis=-1).mean()
    assert within_one_column <= ALPHA and within_columns > 0.15  # 2.8 % and 20.6 % (the audit's 21 %)
    assert family <= ALPHA + 0.02  # 2.7 %
    # compare judges exactly that family: 8 columns x 15 pairs, one Holm over all 120
    rng = np.random.default_rng(1)
    values = {(e, f"t{c}"): list(rng.normal(0.5, 0.1, 3)) for e in "abcdef" for c in range(8)}
    comp = compare(runs(values), "val/acc")
    pairs = [p for col in comp.cols for p in comp.pairs[col]]
    assert comp.protocol.family == len(pairs) == 120
    assert [p["p_holm"] for p in pairs] == pytest.approx(holm_array(np.array([p["p"] for p in pairs])).tolist())
    assert "Holm over the 120 tests (every pair x column)" in " ".join(text_of(render_table(comp)).split())


def test_tost_claims_equivalence_at_the_margin_s_edge_at_most_alpha_of_the_time():
    """TOST's error: where the true difference is the margin itself, compare's pair test finds 'equivalent'
    (p < alpha) in at most alpha of the draws (+ 3 points of simulation error)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.1, 0.1, (300, 5)), rng.normal(0.0, 0.1, (300, 5))  # true difference 0.1 = the margin
    tests = [pair_test(Cell([], list(x)), Cell([], list(y)), False, 0.1) for x, y in zip(a, b)]
    assert np.mean([t["p_equivalence"] < ALPHA for t in tests]) <= ALPHA + 0.03


def test_primary_metric_makes_the_rest_exploratory():
    values = {("rope", "copy"): [0.90, 0.91, 0.92], ("alibi", "copy"): [0.50, 0.52, 0.51],
              ("rope", "rev"): [0.3, 0.35, 0.32], ("alibi", "rev"): [0.6, 0.62, 0.61]}  # fmt: skip
    records = [
        rec(e, t, s, {"val/acc": v, "val/loss": 1 - v}) for (e, t), vs in values.items() for s, v in enumerate(vs)
    ]
    comps = compare_metrics(records, ["val/acc", "val/loss"], primary="val/acc")
    assert comps[0].protocol.family == 2 and comps[0].protocol.exploratory == 2
    assert not comps[0].exploratory and comps[1].exploratory and comps[1].tests["copy"].startswith("(exploratory) ")
    text = " ".join(to_markdown(comps).split())
    assert "Holm over the 2 tests of the primary metric val/acc (the other metrics' 2 tests: exploratory, Holm " \
           "over those)" in text  # fmt: skip
    assert json.loads(to_json(comps))["comparisons"][1]["protocol"]["family"] == "exploratory"
    everything = compare_metrics(records, ["val/acc", "val/loss"])
    assert everything[0].protocol.family == 4  # no --primary: one family over both metrics
    with pytest.raises(ConfigError, match=r"^--primary 'val/ppl' is not a metric shown; choose one of: val/acc, val/"):
        compare_metrics(records, ["val/acc", "val/loss"], primary="val/ppl")


def test_perplexity_is_tested_on_the_log_scale():
    """Point 4: ALiBi 6.43 vs the sinusoid's 192 at 8x the training context: on the raw scale one seed's tail
    leaves Welch at p = 0.1 (inconclusive); on log perplexity ALiBi is better, its interval a ratio."""
    alibi, sinusoid = [6.40, 6.43, 6.46], [100.0, 150.0, 326.0]
    assert stats.ttest_ind(alibi, sinusoid, equal_var=False).pvalue > ALPHA  # the raw-scale test misses it
    comp = compare(runs({("alibi", "wiki"): alibi, ("sinusoidal", "wiki"): sinusoid}, "val/ppl_ctx_1024"),
                   "val/ppl_ctx_1024")  # fmt: skip
    (pair,) = comp.pairs["wiki"]
    assert pair["scale"] == "log" and pair["verdict"] == "better" and pair["p_holm"] < ALPHA
    assert pair["ci_low"] < pair["difference"] < pair["ci_high"] < 1  # alibi / sinusoid, geometric means
    assert (
        "Welch t-test over seeds on log values" in comp.tests["wiki"]
        and "alibi better than sinusoidal" in comp.tests["wiki"]
    )
    protocol = json.loads(to_json(comp))["protocol"]
    assert protocol["test"].endswith("on log values") and "ratio of geometric means" in protocol["interval"]


@pytest.mark.parametrize("columns, seeds, expected", [(1, 2, None), (2, 3, None), (4, 3, 0.85)])
def test_the_iqm_footer_states_its_real_coverage(columns, seeds, expected):
    """Point 4: the IQM footer said 'about 82 % at 4 columns x 3 seeds' whatever the table; it now prints the
    simulated coverage of the table's own shape (1 x 2: about 50 %)."""
    rng = np.random.default_rng(0)
    values = {(e, f"t{c}"): list(rng.normal(0.5, 0.1, seeds)) for e in ("rope", "alibi") for c in range(columns)}
    comp = compare(runs(values), "val/acc")
    if expected is None:  # an IQM needs 3 columns or more (its bootstrap covered 51 % at 1 x 2, 75 % at 1 x 3)
        assert not comp.iqm and any(line.startswith("no ") and "IQM" in line for line in notes(comp))
        return
    assert set(comp.iqm_level) == {"rope", "alibi"} and comp.iqm_level["rope"] == pytest.approx(expected, abs=0.03)
    (line,) = [line for line in notes(comp) if line.startswith("IQM")]
    shape = f"{columns} column{'s' * (columns > 1)} x {seeds} seeds"
    assert f"its real coverage at {shape}, simulated on normal data: {comp.iqm_level['rope']:.0%}]" in line
    assert "82 %" not in line and json.loads(to_json(comp))["iqm_level"]["rope"] == comp.iqm_level["rope"]


@pytest.mark.parametrize(
    "metric, why",
    [
        ("val/acc_ood", "val/acc_ood is measured beyond the training length"),
        ("val/tok_acc_ood", "val/tok_acc_ood is measured beyond the training length"),
        ("val/acc_len_8", "val/acc_len_8 is measured at length 8, beyond the training length 4"),
        ("val/ppl_ctx_512", "val/ppl_ctx_512 is measured at length 512, beyond the training length 128"),
    ],
)
def test_selection_on_a_beyond_training_length_metric_is_refused_unless_allowed(tmp_path, capsys, metric, why):
    """Point 5: --value best on a beyond-length metric picks checkpoints on held-out lengths: one line, exit 2,
    unless --allow_ood_selection, and then the output says so."""
    from pe_sweeps import cli

    values = {("rope", "copy"): [0.9, 0.8, 0.85], ("alibi", "copy"): [0.5, 0.6, 0.55]}
    records = [rec(e, t, s, {metric: v, "val/acc_len_4": v}) for (e, t), vs in values.items() for s, v in enumerate(vs)]
    write_records(tmp_path, records)
    with pytest.raises(SystemExit) as exit_info:
        cli.cli_main(["compare", f"--out_dir={tmp_path}", f"--metric={metric}", "--value=best"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err == (
        f"error: {why}: --value best picks each run's best validation of it, which selects checkpoints on held-out "
        "lengths; use --value final (or --metric without it), or --allow_ood_selection to show it labelled"
    )
    comp = compare_main([f"--out_dir={tmp_path}", f"--metric={metric}", "--value=best", "--allow_ood_selection"])
    assert (
        comp.ood_selection.startswith(why) and "selected on a beyond-training-length metric" in capsys.readouterr().out
    )
    compare_main([f"--out_dir={tmp_path}", f"--metric={metric}", "--format=json"])  # --value final: no selection
    assert json.loads(capsys.readouterr().out)["ood_selection"] is None
    within = compare_main([f"--out_dir={tmp_path}", "--metric=val/acc_len_4", "--value=best"])  # within training
    assert within.ood_selection is None and not math.isnan(within.cells["rope", "copy"].mean)


def test_every_format_carries_the_pair_verdicts(capsys):
    """Point 7: the json holds each pair's verdict, the test, interval method, alpha, margin and family size; the
    markdown and LaTeX carry the verdict where they show the pair, and the protocol once."""
    records = runs({("rope", "copy"): [0.90, 0.91, 0.92], ("alibi", "copy"): [0.50, 0.52, 0.51]})
    comps = compare_metrics(records, ["val/acc"], margins={"val/acc": 0.02}, margin_source="--margin")
    data = json.loads(to_json(comps))
    (pair,) = data["pairs"]["copy"]
    assert pair["verdict"] == "better" and pair["margin"] == 0.02 and pair["p_holm"] == pytest.approx(pair["p"])
    assert {"test", "interval", "alpha", "margin", "family_size"} <= set(data["protocol"])
    assert data["protocol"]["alpha"] == 0.05 and data["protocol"]["family_size"] == 1
    for text in (to_markdown(comps), to_latex(comps)):
        assert "rope better than alibi" in text and "Holm over the 1 test" in text
        assert "separated" not in text


def test_best_over_chosen_on_a_beyond_training_length_metric_is_refused_unless_allowed(tmp_path, capsys):
    """Point 5: --best-over chooses each cell's setting on the first metric; on val/acc_ood that is test-set
    selection too."""
    records = [rec(e, "copy", s, {"val/acc_ood": v + lr, "val/acc": v}) for e, v in (("rope", 0.8), ("alibi", 0.5))
               for s in range(2) for lr in (0.0, 0.1)]  # fmt: skip
    for r in records:
        r.config["model"]["init_args"]["lr"] = 1e-3 if r.final["val/acc_ood"] == r.final["val/acc"] else 1e-2
    write_records(tmp_path, records)
    args = [f"--out_dir={tmp_path}", "--metric=val/acc_ood,val/acc", "--best-over=model.lr"]
    with pytest.raises(ConfigError, match=r"^val/acc_ood is measured beyond the training length: --best-over model.lr"):
        compare_main(args)
    comps = compare_main([*args, "--allow_ood_selection"])
    assert "--best-over model.lr is chosen on it" in comps[0].ood_selection and comps[1].ood_selection is None
    assert compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/acc_ood", "--best-over=model.lr"])
