"""`cli.py compare` on hand-made records: aggregation over seeds, ranks, exclusions with reasons, the
Welch statement, machine formats, the HTML report, the W&B path (fake Api) and one offline W&B fit."""

import csv
import io
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY
from rich.console import Console
from scipy import stats

from errors import ConfigError
from tracking import compare as C
from tracking.compare_report import PLOTS, write_report
from tracking.records import load_records
from tracking.wandb_records import wandb_record

ROOT = Path(__file__).resolve().parents[1]


def rec(encoding="rope", task="copy", seed=0, acc=0.9, status="finished", lr=1e-3, sweep=None, **extra) -> dict:
    """A record as tracking/records.py writes it, with per-length accuracy and a two-point history."""
    final = {
        "val/acc": acc,
        "val/loss": 2.0 - acc,
        "val/acc_len_2": acc,
        "val/acc_len_4": acc,
        "val/acc_len_8": acc / 2,
    }
    config = {
        "seed_everything": seed,
        "trainer": {"max_steps": 100, "logger": None},
        "model": {"class_path": "M", "init_args": {"arch": {"encoding": encoding, "dim": 32}, "lr": lr}},
        "data": {"class_path": "D", "init_args": {"task": task, "train_max_len": 4}},
        "run": {"out_dir": f"/tmp/{encoding}-{seed}"},
    }
    history = [{"step": 50, "val/acc": acc / 2, "val/loss": 2.5}, {"step": 100, "val/acc": acc, "val/loss": 2.0 - acc}]
    record = {
        "name": f"{task}-{encoding}-s{seed}", "group": f"{task}/{encoding}", "task": task, "encoding": encoding,
        "seed": seed, "sweep": sweep, "subcommand": "fit", "status": status, "config": config, "final": final,
        "best": dict(final, **{"val/acc": acc + 0.05}), "history": history, "updated_at": 1.0,
        "run_dir": f"out/runs/{task}-{encoding}-s{seed}-{status}",
    }  # fmt: skip
    record.update(extra)
    return record


def grid() -> list[dict]:
    """rope beats alibi on copy, alibi beats rope on reverse, none is last on both."""
    values = {
        ("rope", "copy"): [0.9, 0.8, 1.0], ("alibi", "copy"): [0.5, 0.6, 0.55], ("none", "copy"): [0.1, 0.12],
        ("rope", "reverse"): [0.2, 0.3], ("alibi", "reverse"): [0.4, 0.5], ("none", "reverse"): [0.05],
    }  # fmt: skip
    return [rec(e, t, s, a) for (e, t), accs in values.items() for s, a in enumerate(accs)]


def text_of(renderable) -> str:
    console = Console(file=io.StringIO(), width=250, record=True)
    console.print(renderable)
    return console.export_text()


def test_cells_mean_std_n_ci_ranks_and_best():
    comp = C.compare(grid(), "val/acc")
    cell = comp.cells["rope", "copy"]
    assert (cell.n, cell.mean, cell.std) == (3, pytest.approx(0.9), pytest.approx(0.1))
    # every one of the 27 resamples is equally likely; all-0.8 and all-1.0 each have 1/27 > 2.5 %
    exact = sorted(np.mean(r) for r in itertools.product(cell.values, repeat=3))
    assert cell.ci == (pytest.approx(exact[0]), pytest.approx(exact[-1]))
    assert cell.ci == (pytest.approx(0.8), pytest.approx(1.0)) and cell.decimals == 2
    assert math.isnan(comp.cells["none", "reverse"].std) and comp.cells["none", "reverse"].n == 1
    assert comp.ranks["rope", "copy"] == 1 and comp.ranks["alibi", "copy"] == 2 and comp.ranks["none", "copy"] == 3
    assert comp.ranks["alibi", "reverse"] == 1 and comp.ranks["rope", "reverse"] == 2
    assert comp.mean_rank == {"alibi": 1.5, "rope": 1.5, "none": 3.0}
    assert comp.mrr == {"alibi": 0.75, "rope": 0.75, "none": pytest.approx(1 / 3)}
    assert comp.is_best("rope", "copy") and comp.is_best("alibi", "reverse") and not comp.is_best("rope", "reverse")
    text = text_of(C.comparison_table(grid(), "val/acc"))
    assert "* 0.90 ± 0.10 (n=3) [0.80, 1.00] #1" in text and "mean rank" in text and "MRR" in text and "1.50" in text
    assert "95% percentile bootstrap over seeds (10,000 resamples, RNG seed 0)" in text


def test_min_goal_ranks_lowest_first_and_best_value():
    comp = C.compare(grid(), "val/loss")
    assert comp.goal == "min" and comp.ranks["rope", "copy"] == 1 and comp.ranks["none", "copy"] == 3
    best = C.compare(grid(), "val/acc", value="best")
    assert best.cells["rope", "copy"].mean == pytest.approx(0.95)


def test_welch_statement_per_column():
    comp = C.compare(grid(), "val/acc")
    assert comp.tests["copy"].startswith("copy: rope (0.90) vs runner-up alibi (0.55): Welch t-test p=")
    assert "Holm-adjusted over 3 pairs p=" in comp.tests["copy"] and comp.tests["copy"].endswith("pairs separated")
    (top, *_) = comp.pairs["copy"]
    raw = stats.ttest_ind([0.9, 0.8, 1.0], [0.5, 0.6, 0.55], equal_var=False).pvalue
    assert (top["a"], top["b"], top["p"]) == ("rope", "alibi", pytest.approx(raw))
    assert top["p_holm"] == pytest.approx(C.holm([p["p"] for p in comp.pairs["copy"]])[0])
    two_rows = C.compare([r for r in grid() if r["encoding"] != "none"], "val/acc")
    assert "Holm" not in two_rows.tests["copy"] and "separated at 0.05" in two_rows.tests["copy"]
    one_seed = C.compare([rec("rope", acc=0.9), rec("alibi", acc=0.5), rec("alibi", seed=1, acc=0.6)], "val/acc")
    assert one_seed.tests["copy"].endswith("n<2, not testable")
    assert any("Welch t-test p=" in line for line in C.notes(comp))


def test_unusable_runs_are_excluded_and_reported():
    records = grid() + [
        rec("rope", seed=7, acc=0.0, status="running"),  # stale record of a retried trial
        rec("rope", seed=8, acc=0.0, status="failed", error="RuntimeError: boom"),
        rec("rope", seed=9, acc=0.0, status="diverged"),
        rec("rope", seed=10, acc=float("nan")),
        rec("alibi", seed=11, final={"val/loss": 1.0}),
        rec("rope", seed=0, acc=0.0, updated_at=0.5),  # an older repeat of seed 0
    ]
    comp = C.compare(records, "val/acc")
    assert comp.cells["rope", "copy"].values == [0.9, 0.8, 1.0]  # unchanged by the bad runs
    reasons = {(e.row, e.col, e.reason) for e in comp.excluded}
    assert reasons == {
        ("rope", "copy", "status running"), ("rope", "copy", "status failed"), ("rope", "copy", "status diverged"),
        ("rope", "copy", "val/acc is nan"), ("alibi", "copy", "no val/acc"),
        ("rope", "copy", "repeats seed 0 (newer run kept)"),
    }  # fmt: skip
    text = text_of(C.render_table(comp))
    assert "excluded 6 run(s) [val/acc]:" in text and "rope / copy: 1 x status running" in text


def test_mixed_configs_keep_the_majority_or_exclude_the_cell():
    records = [rec(seed=s, acc=0.9) for s in range(3)] + [rec(seed=3, acc=0.1, lr=0.01)]
    comp = C.compare(records, "val/acc")
    assert comp.cells["rope", "copy"].n == 3
    (dropped,) = comp.excluded
    assert dropped.reason == "config differs: model.init_args.lr=0.01 (kept: 0.001)"
    tie = C.compare([rec(seed=0), rec(seed=1, lr=0.01)], "val/acc")
    assert not tie.cells and len(tie.excluded) == 2
    assert all(e.reason.startswith("mixed configs, no majority: model.init_args.lr=") for e in tie.excluded)
    split = C.compare([rec(seed=0), rec(seed=1, lr=0.01)], "val/acc", rows="encoding,model.lr")
    assert set(split.cells) == {("rope, 0.001", "copy"), ("rope, 0.01", "copy")} and not split.excluded


def test_machine_formats_parse():
    comp = C.compare(grid() + [rec("rope", seed=5, status="running")], "val/acc")
    rows = list(csv.DictReader(io.StringIO(C.to_csv(comp))))
    rope = next(r for r in rows if r["row"] == "rope" and r["col"] == "copy")
    assert float(rope["mean"]) == pytest.approx(0.9) and rope["n"] == "3" and rope["best"] == "True"
    data = json.loads(C.to_json(comp))
    assert data["metric"] == "val/acc" and data["goal"] == "max" and len(data["cells"]) == 6
    assert data["mean_rank"]["none"] == 3.0 and data["excluded"][0]["reason"] == "status running"
    assert next(c for c in data["cells"] if c["row"] == "none" and c["col"] == "reverse")["std"] is None
    lines = C.to_markdown(comp).splitlines()
    assert lines[0] == "| encoding | copy | reverse | mean rank | MRR |" and lines[1] == "|---|---|---|---|---|"
    assert all(line.count("|") == 6 for line in lines[2:5]) and lines[4].startswith("| none |")
    assert "| rope | **0.90 ± 0.10 (n=3) [0.80, 1.00] #1** |" in C.to_markdown(comp)
    assert any(line.startswith("- copy: rope") and "Welch t-test p=" in line for line in lines)


def test_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="available: val/acc, val/acc_len_<n>, val/loss"):
        C.compare(grid(), "val/bleu")
    with pytest.raises(ConfigError, match="choose one of: table, csv, json, markdown, latex"):
        C.compare_main([f"--out_dir={tmp_path}", "--format=xml"])
    with pytest.raises(ConfigError, match=f"no run records \\(record.json\\) under '{tmp_path}'"):
        C.compare_main([f"--out_dir={tmp_path}"])
    write_records(tmp_path, [rec(sweep="a")])
    with pytest.raises(ConfigError, match="no runs of sweep 'b' under .*; sweeps found: a"):
        C.compare_main([f"--out_dir={tmp_path}", "--sweep=b"])


def write_records(root: Path, records: list[dict]) -> None:
    for i, record in enumerate(records):
        path = root / "runs" / f"run-{i}" / "record.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({k: v for k, v in record.items() if k != "run_dir"}))


def test_compare_main_reads_a_sweep_its_metric_and_varied_parameters(tmp_path, capsys):
    import optuna

    study = grid() + [rec("rope", seed=s, acc=0.3, lr=0.01) for s in range(2)]
    write_records(tmp_path, [dict(r, sweep="study") for r in study] + [rec("rope", acc=0.1, sweep="other")])
    (tmp_path / "sweeps" / "study").mkdir(parents=True)
    storage = f"sqlite:///{tmp_path / 'sweeps' / 'study' / 'optuna.db'}"
    parameters = {"model.arch.encoding": {"values": ["rope"]}, "model.lr": {"values": [0.001, 0.01]}, "data.task": {}}
    sweep = {"metric": {"name": "val/loss"}, "parameters": {**parameters, "seed_everything": {"values": [0, 1]}}}
    optuna.create_study(study_name="study", storage=storage).set_user_attr("sweep", sweep)
    comp = C.compare_main([f"--out_dir={tmp_path}", "--sweep=study", "--format=json"])
    data = json.loads(capsys.readouterr().out)
    assert comp.metric == data["metric"] == "val/loss" and data["rows"] == ["encoding", "model.lr"]
    assert len(data["cells"]) == 7 and not comp.excluded  # the other sweep's run is not read
    assert comp.cells["rope, 0.01", "copy"].n == 2 and comp.cells["rope, 0.001", "copy"].n == 3
    console = Console(file=io.StringIO(), width=250)
    C.print_comparison(str(tmp_path), "study", "val/acc", console=console)
    assert "final val/acc (max)" in console.file.getvalue() and "rope, 0.01" in console.file.getvalue()
    C.print_comparison(str(tmp_path / "empty"), "study", None, console=console)
    assert "compare: no run records" in console.file.getvalue()  # one line, never raises


def test_report_has_every_plot_and_page_refers_to_each(tmp_path):
    records = grid() + [rec("rope", seed=9, status="failed")]
    page = write_report(C.compare(records, "val/acc"), tmp_path / "report")
    text = page.read_text()
    pngs = sorted(p.name for p in page.parent.glob("*.png"))
    assert pngs == ["bars.png", "curves.png", "length.png"]  # no ppl_ctx_<n> in these records
    for name in pngs:
        assert f'alt="{name}" src="data:image/png;base64,' in text and f'href="{name}"' in text
    assert "Skipped: no run logged perplexity per context length" in text
    assert "Welch t-test p=" in text and "status failed" in text
    with_ppl = [dict(r, final={**r["final"], "val/ppl_ctx_8": 3.0, "val/ppl_ctx_16": 5.0}) for r in grid()]
    page = write_report(C.compare(with_ppl, "val/acc"), tmp_path / "report")
    assert (page.parent / "ppl_ctx.png").is_file() and 'alt="ppl_ctx.png"' in page.read_text()
    assert {name for name, *_ in PLOTS} == {p.name for p in page.parent.glob("*.png")}


class FakeRun:
    """The attributes of wandb.apis.public.Run that compare reads."""

    def __init__(self, record: dict, state: str):
        self.name, self.group, self.state, self.url = record["name"], record["group"], state, f"wandb/{record['name']}"
        self.config = {
            "encoding": record["encoding"], "task": record["task"], "seed_everything": record["seed"],
            "sweep": record["sweep"], "resolved_config": record["config"], "_wandb": {"x": 1},
        }  # fmt: skip
        acc = record["final"]["val/acc"]
        self.summary = {"val/acc": {"last": acc, "max": acc + 0.05}, "val/loss": 1.0, "_step": 9, "epoch": 0}
        self._history = [{"_step": i, "trainer/global_step": h["step"], **h} for i, h in enumerate(record["history"])]

    def history(self, pandas=True):
        assert pandas is False
        return self._history


def test_wandb_path_with_a_fake_api(monkeypatch, capsys):
    import wandb

    runs = [FakeRun(r, "finished") for r in grid()] + [FakeRun(rec("rope", seed=4), "crashed")]

    class FakeApi:
        def runs(self, path):
            assert path == "me/pe-sweeps"
            return runs

    monkeypatch.setattr(wandb, "Api", FakeApi)
    comp = C.compare_main(["--wandb=me/pe-sweeps", "--format=csv"])
    assert comp.cells["rope", "copy"].values == [0.9, 0.8, 1.0] and comp.mean_rank["none"] == 3.0
    assert [(e.reason, e.run) for e in comp.excluded] == [("status failed", "wandb/copy-rope-s4")]
    assert "rope,copy,0.9" in capsys.readouterr().out
    best = C.compare_main(["--wandb=me/pe-sweeps", "--value=best", "--format=json"])
    assert best.cells["rope", "copy"].mean == pytest.approx(0.95)
    record = wandb_record(runs[0])
    assert record["history"][-1] == {"step": 100, "val/acc": 0.9, "val/loss": pytest.approx(1.1)}
    assert record["best"]["val/loss"] == 1.0 and "epoch" not in record["final"]


@pytest.mark.slow
def test_offline_wandb_fit_logs_directions_and_length_table(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "cli.py", "fit", *TINY, f"--run.out_dir={tmp_path}"], cwd=ROOT, env=env,
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = load_records(tmp_path)
    assert record["status"] == "finished"
    (run_dir,) = Path(record["run_dir"]).glob("wandb/offline-run-*")
    assert list(run_dir.glob("files/media/table/val_by_length/*.table.json"))
    binary = next(run_dir.glob("*.wandb")).read_bytes()
    assert b"resolved_config" in binary and b"val/acc_len_8" in binary


def test_default_rows_fold_encoder_and_decoder_encodings_into_the_encoding():
    import yaml

    from tracking.compare import default_rows

    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "sweeps/pe_study_mt.yaml").read_text())
    assert default_rows(spec) == "encoding"
    spec = {"parameters": {"model.arch.encoding": {"values": ["a"]}, "model.lr": {"values": [1, 2]}}}
    assert default_rows(spec) == "encoding,model.lr"


def test_holm_matches_the_hand_computed_step_down():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> monotone: 0.02, 0.03, 0.06, 0.06
    assert C.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert C.holm([0.5, 0.9]) == [1.0, 1.0]  # 0.5 x 2 capped at 1; 0.9 x 1 raised to 1 (monotone)


@pytest.mark.parametrize("values", [[1.0, 1.0, 0.9], [0.0, 0.0, 0.1], [1.0, 0.98], [0.0, 0.0, 0.0, 0.02, 0.0]])
@pytest.mark.parametrize("aggregate", C.AGGREGATES)
def test_intervals_stay_in_the_metric_range_and_are_reproducible(values, aggregate):
    cell = C.Cell([{}] * len(values), values, aggregate)
    low, high = cell.ci
    assert min(values) <= low <= cell.center <= high <= max(values)
    assert C.Cell([{}] * len(values), values, aggregate).ci == (low, high)  # fixed RNG seed


def tupe_records() -> list[dict]:
    """lr 1e-3: seeds 0.5, 0.6, 0.9 (mean 0.667, median 0.6); lr 1e-2: 0.7, 0.7, 0.1 (mean 0.5, median 0.7)."""
    accs = {0.001: [0.5, 0.6, 0.9], 0.01: [0.7, 0.7, 0.1]}
    return [rec("rope", seed=s, acc=a, lr=lr) for lr, values in accs.items() for s, a in enumerate(values)]


def test_best_over_keeps_the_best_aggregate_per_cell_and_names_it():
    median = C.compare(tupe_records(), "val/acc", aggregate="median", best_over="model.lr")
    cell = median.cells["rope", "copy"]
    assert (cell.chosen, cell.center, cell.values) == ("0.01", pytest.approx(0.7), [0.7, 0.7, 0.1])
    assert "@0.01" in C.cell_text(cell, 1, False) and not median.excluded
    assert any(
        line.startswith("rope / copy: model.lr -> 0.01 (medians 0.001: 0.6, 0.01: 0.7)") for line in C.notes(median)
    )
    mean = C.compare(tupe_records(), "val/acc", best_over="model.lr")
    assert mean.cells["rope", "copy"].chosen == "0.001"  # the rule's aggregate decides
    loss = C.compare_metrics(tupe_records(), ["val/acc", "val/loss"], aggregate="median", best_over="model.lr")[1]
    assert loss.cells["rope", "copy"].chosen == "0.01"  # chosen on the first metric, not on the loss


def test_several_metrics_side_by_side_and_latex(tmp_path, capsys):
    write_records(tmp_path, grid())
    comps = C.compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/loss", "--format=latex"])
    assert [c.metric for c in comps] == ["val/acc", "val/loss"]
    latex = capsys.readouterr().out
    assert latex.startswith("\\begin{table}") and "\\toprule" in latex and latex.rstrip().endswith("\\end{table}")
    header = next(line for line in latex.splitlines() if line.startswith("encoding &"))
    assert (
        header == "encoding & copy val/acc & reverse val/acc & copy val/loss & reverse val/loss & mean rank val/acc "
        "& MRR val/acc & mean rank val/loss & MRR val/loss \\\\"
    )
    assert "\\textbf{0.90 $\\pm$ 0.10 (n=3) [0.80, 1.00] \\#1}" in latex and "val\\_acc" not in header
    assert "95\\% percentile bootstrap" in latex
    C.compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/loss", "--format=json"])
    data = json.loads(capsys.readouterr().out)
    assert [c["metric"] for c in data["comparisons"]] == ["val/acc", "val/loss"]


def test_best_over_a_key_that_does_not_vary_is_one_line_exit_2(tmp_path, capsys):
    import cli

    write_records(tmp_path, grid())
    with pytest.raises(SystemExit) as exit_info:
        cli.cli_main(["compare", f"--out_dir={tmp_path}", "--best-over=model.lr"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "error: --best-over 'model.lr' does not vary among the selected runs (values: 0.001); "
        "keys that vary: data.init_args.task, model.init_args.arch.encoding"
    )
    assert not (tmp_path / "report").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_end_of_sweep_comparison_shows_in_distribution_and_beyond_length(tmp_path):
    ood = [dict(r, final={**r["final"], "val/acc_ood": r["final"]["val/acc"] / 4}) for r in grid()]
    write_records(tmp_path, ood)
    assert C.side_by_side("val/acc", ood) == ["val/acc", "val/acc_ood"]
    assert C.side_by_side("val/acc_ood", ood) == ["val/acc_ood", "val/acc"]
    assert C.side_by_side("val/acc", grid()) == ["val/acc"] and C.side_by_side("val/loss", ood) == ["val/loss"]
    console = Console(file=io.StringIO(), width=400)
    C.print_comparison(str(tmp_path), None, "val/acc", console=console)
    assert "copy val/acc " in console.file.getvalue() and "copy val/acc_ood" in console.file.getvalue()
    assert "Pareto front" not in console.file.getvalue()  # the companion metric is shown, not an objective


def test_several_metrics_rank_by_the_declared_goal_and_show_their_pareto_front(tmp_path, capsys):
    """Per-metric statistics (ranks by the sweep file's goal when given, else by the name) and, for several
    metrics, the Pareto front of the rows' aggregates (Optuna's rule, per column)."""
    from tracking.pareto import comparison_front

    cost = {"rope": 3.0, "alibi": 1.0, "none": 0.5}  # "cost" has no loss/ppl/error in its name: max by name
    records = [dict(r, final={**r["final"], "val/cost": cost[r["encoding"]]}) for r in grid()]
    comps = C.compare_metrics(records, ["val/acc", "val/cost"], goals=["maximize", "minimize"])
    assert [c.goal for c in comps] == ["max", "min"] and comps[1].ranks["none", "copy"] == 1
    front = comparison_front(comps, ["maximize", "minimize"])
    assert set(front["copy"]) == {"rope", "alibi", "none"}  # each trades accuracy for cost
    assert set(front["reverse"]) == {"alibi", "none"}  # rope: less accurate and dearer than alibi
    assert C.compare(records, "val/cost").goal == "max"  # no declared goal: by the name
    write_records(tmp_path, records)
    comps = C.compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/cost", "--value=final"])
    shown = capsys.readouterr().out
    assert [c.metric for c in comps] == ["val/acc", "val/cost"] and "Pareto front" in shown
    assert "Holm" in shown or "Welch" in shown  # main's statistics under the side-by-side table
