"""`cli.py compare` on hand-made records: aggregation over seeds, ranks, exclusions with reasons, the
Welch statement, machine formats, the HTML report, the W&B path (fake Api) and one offline W&B fit.

Claims of docs/compare.md covered here:
- "python cli.py compare # every run under out/: encoding x task table"; "--sweep quickstart" (one study, its
  metric); "--format latex # table | csv | json | markdown | latex"; "--wandb ENTITY/PROJECT # the same from the W&B
  API": test_compare_main_reads_a_sweep_its_metric_and_varied_parameters, test_machine_formats_parse,
  test_several_metrics_side_by_side_and_latex, test_wandb_path_with_a_fake_api
- "Each cell is the mean (or --aggregate median) +- std over seeds with n and a 95 % interval of that aggregate: a
  Student-t interval of the mean ..., or for the median the distribution-free order-statistic interval";
  "Intervals are clipped to the metric's range ... and a clipped end is marked":
  test_cells_mean_std_n_ci_ranks_and_best, test_intervals_are_clipped_to_the_metric_range_and_the_clipping_shown,
  test_metric_ranges
- "On normal data the t interval covers the true mean 95 % of the time at any seed count":
  test_interval_coverage_is_what_its_label_says
- "--format csv/json carry every cell's per-seed values; --per-seed lists them under the table"; "a footer line says so
  when a cell has fewer than 5": test_per_seed_values_in_csv_and_json_always_and_under_the_table_on_request
- "the IQM ... over columns x seeds with its stratified-bootstrap interval":
  test_iqm_and_its_stratified_bootstrap_follow_rliable
- "These across-column aggregates cover only the rows with a cell in every column ... the rows left out are named";
  "computed only when every column holds one kind of run":
  test_a_row_missing_a_column_is_left_out_of_the_aggregates_and_named,
  test_aggregates_only_over_columns_of_one_kind_of_run
- "A result is defined by an allowlist of its setup ...; everything else ... is ignored"; "A column whose rows differ in
  setup ... is refused, one line naming the keys (exit 2)": test_identity_is_the_setup_allowlist,
  test_a_column_mixing_setups_is_refused_in_one_line
- "Numbers are printed to two significant digits of the interval's width (three significant digits for a single
  seed)": test_numbers_carry_two_significant_digits_of_the_interval_width
- "The best cell per column is marked, each column is ranked and rows carry the mean rank and the mean reciprocal
  rank": test_cells_mean_std_n_ci_ranks_and_best, test_min_goal_ranks_lowest_first_and_best_value
- "a Welch t-test says whether the best row is separated from the runner-up ...; with more than two rows every pair is
  tested and the p-values are Holm-adjusted ... (--format json lists every pair)": test_welch_statement_per_column,
  test_holm_matches_the_hand_computed_step_down
- "--metric a,b puts several metrics side by side, each ranked on its own (by the sweep file's goal when the file
  names the metric, else by its name ...) and then (table format) their Pareto front":
  test_several_metrics_side_by_side_and_latex,
  test_several_metrics_rank_by_the_declared_goal_and_show_their_pareto_front
- "--best-over KEY ...: per cell only the value of KEY with the best aggregate is kept, written @value ...; with
  several metrics it is chosen on the first and kept for the others":
  test_best_over_keeps_the_best_aggregate_per_cell_and_names_it
- "A KEY that takes a single value among the selected runs is one line naming the keys that do vary":
  test_best_over_a_key_that_does_not_vary_is_one_line_exit_2
- "with --sweep the default rows are the parameters the sweep varies, less the --best-over key":
  test_default_rows_fold_encoder_and_decoder_encodings_into_the_encoding
- "Runs that did not finish, lack the metric or were trained with a different config than the rest of their cell are
  excluded and listed with the reason": test_unusable_runs_are_excluded_and_reported,
  test_mixed_configs_keep_the_majority_or_exclude_the_cell
- "--report DIR writes bar charts with error bars, accuracy vs length with the training boundary, validation curves
  ... and, for LM runs, perplexity vs context, all in one HTML page": test_report_has_every_plot_and_page_refers_to_each
- Quick start "ends by printing ... the encoding x task comparison, with ... val/acc ... and ... val/acc_ood ... side
  by side"; "A run is named and compared by <encoder>+<decoder>":
  test_end_of_sweep_comparison_shows_in_distribution_and_beyond_length,
  test_default_rows_fold_encoder_and_decoder_encodings_into_the_encoding
"""

import copy
import csv
import io
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY
from helpers import offline_run_records
from helpers import record as make_record
from rich.console import Console
from scipy import stats

from pe_core.errors import ConfigError
from pe_sweeps.compare.command import compare_main, print_comparison
from pe_sweeps.compare.comparison import Cell, cell_number, cell_text, interval_text, notes
from pe_sweeps.compare.render import comparison_table, grid_of, render_table, to_csv, to_json, to_markdown
from pe_sweeps.compare.report import write_report
from pe_sweeps.compare.selection import side_by_side
from pe_sweeps.compare.statistics import AGGREGATES, compare, compare_metrics, holm
from pe_sweeps.runs.records import RunRecord, load_records, write_record
from pe_sweeps.runs.wandb_records import wandb_record

ROOT = Path(__file__).resolve().parents[2]


def rec(encoding="rope", task="copy", seed=0, acc=0.9, status="finished", lr=1e-3, sweep=None, **extra) -> RunRecord:
    """A record as runs/records.py writes it, with per-length accuracy and a two-point history."""
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
    return make_record(**{**record, **extra})


def grid() -> list[RunRecord]:
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
    comp = compare(grid(), "val/acc")
    cell = comp.cells["rope", "copy"]
    assert (cell.n, cell.mean, cell.std) == (3, pytest.approx(0.9), pytest.approx(0.1))
    half = stats.t.ppf(0.975, 2) * 0.1 / math.sqrt(3)  # Student's t, 2 degrees of freedom: 0.248
    assert cell.ci == (pytest.approx(0.9 - half), 1.0) and cell.interval.clipped == (False, True)  # 1.148 -> 1
    assert cell.decimals == 2
    assert math.isnan(comp.cells["none", "reverse"].std) and comp.cells["none", "reverse"].n == 1
    assert comp.ranks["rope", "copy"] == 1 and comp.ranks["alibi", "copy"] == 2 and comp.ranks["none", "copy"] == 3
    assert comp.ranks["alibi", "reverse"] == 1 and comp.ranks["rope", "reverse"] == 2
    assert comp.mean_rank == {"alibi": 1.5, "rope": 1.5, "none": 3.0}
    assert comp.mrr == {"alibi": 0.75, "rope": 0.75, "none": pytest.approx(1 / 3)}
    assert comp.is_best("rope", "copy") and comp.is_best("alibi", "reverse") and not comp.is_best("rope", "reverse")
    text = text_of(comparison_table(grid(), "val/acc"))
    assert (
        "* 0.90 ± 0.10 (n=3) [0.65, 1.00†] 80% #1" in text and "mean rank" in text and "MRR" in text and "1.50" in text
    )
    assert "95% Student-t interval of the mean over seeds" in text and "† clipped to the metric's range [0, 1]" in text
    assert "n < 5 in every cell: wide by design" in text


def test_min_goal_ranks_lowest_first_and_best_value():
    comp = compare(grid(), "val/loss")
    assert comp.goal == "min" and comp.ranks["rope", "copy"] == 1 and comp.ranks["none", "copy"] == 3
    best = compare(grid(), "val/acc", value="best")
    assert best.cells["rope", "copy"].mean == pytest.approx(0.95)


def test_welch_statement_per_column():
    comp = compare(grid(), "val/acc")
    assert comp.tests["copy"].startswith("copy: rope (0.90) vs runner-up alibi (0.55): Welch t-test over seeds p=")
    assert "Holm p=" in comp.tests["copy"] and comp.tests["copy"].endswith("the column's 3 pairs: 3 better")
    (top, *_) = comp.pairs["copy"]
    raw = stats.ttest_ind([0.9, 0.8, 1.0], [0.5, 0.6, 0.55], equal_var=False).pvalue
    assert (top["a"], top["b"], top["p"], top["verdict"]) == ("rope", "alibi", pytest.approx(raw), "better")
    family = [p for col in comp.cols for p in comp.pairs[col] if not math.isnan(p["p"])]  # 3 on copy, 1 on reverse
    assert top["p_holm"] == pytest.approx(holm([p["p"] for p in family])[0]) and comp.protocol.family == 4
    two_rows = compare([r for r in grid() if r.encoding != "none"], "val/acc")
    assert "rope better than alibi" in two_rows.tests["copy"]
    one_seed = compare([rec("rope", acc=0.9), rec("alibi", acc=0.5), rec("alibi", seed=1, acc=0.6)], "val/acc")
    assert one_seed.tests["copy"].endswith("n<2, not testable")
    assert any("Welch t-test over seeds p=" in line for line in notes(comp))


def test_unusable_runs_are_excluded_and_reported():
    records = grid() + [
        rec("rope", seed=7, acc=0.0, status="running"),  # stale record of a retried trial
        rec("rope", seed=8, acc=0.0, status="failed", error="RuntimeError: boom"),
        rec("rope", seed=9, acc=0.0, status="diverged"),
        rec("rope", seed=10, acc=float("nan")),
        rec("alibi", seed=11, final={"val/loss": 1.0}),
        rec("rope", seed=0, acc=0.0, updated_at=0.5),  # an older repeat of seed 0
    ]
    comp = compare(records, "val/acc")
    assert comp.cells["rope", "copy"].values == [0.9, 0.8, 1.0]  # unchanged by the bad runs
    reasons = {(e.row, e.col, e.reason) for e in comp.excluded}
    assert reasons == {
        ("rope", "copy", "status running"), ("rope", "copy", "status failed"), ("rope", "copy", "status diverged"),
        ("rope", "copy", "val/acc is nan"), ("alibi", "copy", "no val/acc"),
        ("rope", "copy", "repeats seed 0 (newer run kept)"),
    }  # fmt: skip
    text = text_of(render_table(comp))
    assert "excluded 6 run(s) [val/acc]:" in text and "rope / copy: 1 x status running" in text


def test_mixed_configs_keep_the_majority_or_exclude_the_cell():
    records = [rec(seed=s, acc=0.9) for s in range(3)] + [rec(seed=3, acc=0.1, lr=0.01)]
    comp = compare(records, "val/acc")
    assert comp.cells["rope", "copy"].n == 3
    (dropped,) = comp.excluded
    assert dropped.reason == "config differs: model.lr=0.01 (kept: 0.001)"
    tie = compare([rec(seed=0), rec(seed=1, lr=0.01)], "val/acc")
    assert not tie.cells and len(tie.excluded) == 2
    assert all(e.reason.startswith("mixed configs, no majority: model.lr=") for e in tie.excluded)
    split = compare([rec(seed=0), rec(seed=1, lr=0.01)], "val/acc", rows="encoding,model.lr")
    assert set(split.cells) == {("rope, 0.001", "copy"), ("rope, 0.01", "copy")} and not split.excluded
    shown = [rec(seed=s) for s in range(3)]  # display options are not the config: one cell, nothing excluded
    shown[0].config["trainer"] |= {"enable_progress_bar": True, "enable_model_summary": False}
    assert compare(shown, "val/acc").cells["rope", "copy"].n == 3


def test_machine_formats_parse():
    comp = compare(grid() + [rec("rope", seed=5, status="running")], "val/acc")
    rows = list(csv.DictReader(io.StringIO(to_csv(comp))))
    rope = next(r for r in rows if r["encoding"] == "rope" and r["task"] == "copy")
    assert float(rope["mean"]) == pytest.approx(0.9) and rope["n"] == "3" and rope["best"] == "True"
    data = json.loads(to_json(comp))
    assert data["metric"] == "val/acc" and data["goal"] == "max" and len(data["cells"]) == 6
    assert data["mean_rank"]["none"] == 3.0 and data["excluded"][0]["reason"] == "status running"
    assert next(c for c in data["cells"] if c["row"] == "none" and c["col"] == "reverse")["std"] is None
    lines = to_markdown(comp).splitlines()
    assert lines[0] == "| encoding | copy | reverse | mean rank | MRR |" and lines[1] == "|---|---|---|---|---|"
    assert all(line.count("|") == 6 for line in lines[2:5]) and lines[4].startswith("| none |")
    assert "| rope | **0.90 ± 0.10 (n=3) [0.65, 1.00†] 80% #1** |" in to_markdown(comp)
    assert "- copy: rope better than alibi (Holm p=" in to_markdown(comp)  # the column's verdict, in the legend


def test_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="available: val/acc, val/acc_len_<n>, val/loss"):
        compare(grid(), "val/bleu")
    with pytest.raises(ConfigError, match="choose one of: table, csv, json, markdown, latex"):
        compare_main([f"--out_dir={tmp_path}", "--format=xml"])
    with pytest.raises(ConfigError, match=f"no run records \\(record.json\\) under '{tmp_path}'"):
        compare_main([f"--out_dir={tmp_path}"])
    write_records(tmp_path, [rec(sweep="a")])
    with pytest.raises(ConfigError, match="no runs of sweep 'b' under .*; sweeps found: a"):
        compare_main([f"--out_dir={tmp_path}", "--sweep=b"])


def test_unwritable_report_and_unreadable_studies_are_one_line(tmp_path):
    """--report onto a file, and a sweep's optuna.db that is corrupt or of a newer Optuna's schema (`sweep` said
    so in one line, `compare` printed an 88-line traceback): one line naming the file."""
    import sqlite3

    import optuna

    write_records(tmp_path, [rec(sweep="s"), rec(seed=1, sweep="s")])
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match=f"--report: cannot create the folder {tmp_path}/a_file \\(a file is in"):
        compare_main([f"--out_dir={tmp_path}", f"--report={tmp_path / 'a_file'}"])
    db = tmp_path / "sweeps" / "s" / "optuna.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    with pytest.raises(ConfigError, match=f"cannot open sweep storage sqlite:///{db}: .* file is not a database"):
        compare_main([f"--out_dir={tmp_path}", "--sweep=s"])
    db.unlink()
    optuna.create_study(study_name="s", storage=f"sqlite:///{db}")
    with sqlite3.connect(db) as connection:  # as a newer Optuna would leave it
        connection.execute("UPDATE alembic_version SET version_num = 'v9.9.9'")
    with pytest.raises(ConfigError, match="optuna.db: The runtime optuna version .* no longer compatible with the"):
        compare_main([f"--out_dir={tmp_path}", "--sweep=s"])


def write_records(root: Path, records: list[RunRecord]) -> None:
    for i, record in enumerate(records):
        write_record(root / "runs" / f"run-{i}" / "record.json", record)


def test_compare_main_reads_a_sweep_its_metric_and_varied_parameters(tmp_path, capsys):
    import optuna

    study = grid() + [rec("rope", seed=s, acc=0.3, lr=0.01) for s in range(2)]
    write_records(tmp_path, [replace(r, sweep="study") for r in study] + [rec("rope", acc=0.1, sweep="other")])
    (tmp_path / "sweeps" / "study").mkdir(parents=True)
    storage = f"sqlite:///{tmp_path / 'sweeps' / 'study' / 'optuna.db'}"
    parameters = {"model.arch.encoding": {"values": ["rope"]}, "model.lr": {"values": [0.001, 0.01]}, "data.task": {}}
    sweep = {"metric": {"name": "val/loss"}, "parameters": {**parameters, "seed_everything": {"values": [0, 1]}}}
    optuna.create_study(study_name="study", storage=storage).set_user_attr("sweep", sweep)
    comp = compare_main([f"--out_dir={tmp_path}", "--sweep=study", "--format=json"])
    data = json.loads(capsys.readouterr().out)
    assert comp.metric == data["metric"] == "val/loss" and data["rows"] == ["encoding", "model.lr"]
    assert len(data["cells"]) == 7 and not comp.excluded  # the other sweep's run is not read
    assert comp.cells["rope, 0.01", "copy"].n == 2 and comp.cells["rope, 0.001", "copy"].n == 3
    console = Console(file=io.StringIO(), width=250)
    print_comparison(str(tmp_path), "study", "val/acc", console=console)
    assert "final val/acc (max)" in console.file.getvalue() and "rope, 0.01" in console.file.getvalue()
    print_comparison(str(tmp_path / "empty"), "study", None, console=console)
    assert "compare: no run records" in console.file.getvalue()  # one line, never raises


def test_report_has_every_plot_and_page_refers_to_each(tmp_path):
    records = grid() + [rec("rope", seed=9, status="failed")]
    page = write_report(compare(records, "val/acc"), tmp_path / "report")
    text = page.read_text()
    pngs = sorted(p.name for p in page.parent.glob("*.png"))
    assert pngs == ["curves-val_acc.png", "heatmap.png", "length.png", "points-val_acc.png"]  # no ppl_ctx_<n>
    for name in pngs:
        assert f'alt="{name}" src="data:image/png;base64,' in text and f'href="{name}"' in text
    assert "Perplexity" not in text and "a performance profile needs 3 columns or more (2 here)" in text
    assert "Welch t-test over seeds p=" in text and "status failed" in text
    with_ppl = [replace(r, final={**r.final, "val/ppl_ctx_8": 3.0, "val/ppl_ctx_16": 5.0}) for r in grid()]
    page = write_report(compare(with_ppl, "val/acc"), tmp_path / "report")
    assert (page.parent / "ppl_ctx.png").is_file() and 'alt="ppl_ctx.png"' in page.read_text()
    assert len(list(page.parent.glob("*.png"))) == 5


class FakeRun:
    """The attributes of wandb.apis.public.Run that compare reads."""

    def __init__(self, record: RunRecord, state: str):
        self.name, self.group, self.state, self.url = record.name, record.group, state, f"wandb/{record.name}"
        self.config = {
            "encoding": record.encoding, "task": record.task, "seed_everything": record.seed,
            "sweep": record.sweep, "resolved_config": record.config, "_wandb": {"x": 1},
        }  # fmt: skip
        acc = record.final["val/acc"]
        self.summary = {"val/acc": {"last": acc, "max": acc + 0.05}, "val/loss": 1.0, "_step": 9, "epoch": 0}
        self._history = [{"_step": i, "trainer/global_step": h["step"], **h} for i, h in enumerate(record.history)]

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
    comp = compare_main(["--wandb=me/pe-sweeps", "--format=csv"])
    assert comp.cells["rope", "copy"].values == [0.9, 0.8, 1.0] and comp.mean_rank["none"] == 3.0
    assert [(e.reason, e.run) for e in comp.excluded] == [("status failed", "wandb/copy-rope-s4")]
    assert "rope,copy,0.9" in capsys.readouterr().out
    best = compare_main(["--wandb=me/pe-sweeps", "--value=best", "--format=json"])
    assert best.cells["rope", "copy"].mean == pytest.approx(0.95)
    record = wandb_record(runs[0])
    assert record.history[-1] == {"step": 100, "val/acc": 0.9, "val/loss": pytest.approx(1.1)}
    assert record.best["val/loss"] == 1.0 and "epoch" not in record.final


@pytest.mark.slow
def test_offline_wandb_fit_logs_directions_and_length_table(tmp_path):
    """Also issue 13's W&B identity, checked in the offline run files: a sweep trial's name and group (a
    swept encoding is not repeated in the name), `seed` = seed_everything and `data_seed`, `length` as the
    per-length x axis with a task/encoding/seed table, `train/lr`, W&B's own sync hint (no WANDB_SILENT),
    the fit summary, no Lightning tips."""
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "PE_SWEEP": "lr_search-rope",
           "PE_SWEEP_PARAMS": '{"model.arch.encoding": "rope", "model.lr": 0.002}'}  # fmt: skip
    env.pop("WANDB_SILENT", None)
    result = subprocess.run(
        [sys.executable, "cli.py", "fit", *TINY, f"--run.out_dir={tmp_path}", "--model.lr=0.002",
         "--seed_everything=3", "--data.seed=5"], cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = load_records(tmp_path)
    assert record.status == "finished"
    # TINY's --model.arch.dim=32 --model.arch.depth=1 set the run apart from the model's defaults (issue 29.2)
    assert record.name == "copy-rope-dim=32-depth=1-lr=0.002-s3"
    assert record.group == "lr_search-rope/copy/rope-dim=32-depth=1"
    (run_dir,) = Path(record.run_dir).glob("wandb/offline-run-*")
    assert record.wandb["mode"] == "offline" and record.wandb["dir"] == str(run_dir)
    assert record.step == record.max_steps == 4  # progress for the sweep's live view
    assert (record.world_size, record.precision) == (1, "32-true")  # part of compare's SETUP
    (table,) = run_dir.glob("files/media/table/val_by_length/*.table.json")
    table = json.loads(table.read_text())
    assert table["columns"] == ["task", "encoding", "seed", "length", "acc", "tok_acc"]
    assert table["data"][0][:4] == ["copy", "rope", 3, 1]
    binary = next(run_dir.glob("*.wandb")).read_bytes()
    assert b"resolved_config" in binary and b"val/acc_len_8" in binary
    output = result.stdout + result.stderr
    assert f"wandb sync {run_dir}" in result.stdout and f"record: {record.run_dir}" in result.stdout
    assert "val/acc_ood" in result.stdout and "Tip:" not in output and "You can sync this run" in output
    records = offline_run_records(run_dir)
    if records is None:
        pytest.skip("`wandb leet inspect` is not available: the rest reads the .wandb log through it")
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["display_name"] == record.name and run["run_group"] == record.group
    config = {}
    for r in records:
        if r["type"] == "config":
            config.update(r["config"]["update"])
    assert (config["seed"], config["data_seed"], config["encoding"], config["task"]) == (3, 5, "rope", "copy")
    assert config["lr"] == 0.002 and config["sweep"] == "lr_search-rope"
    metrics = {r["metric"].get("name"): r["metric"] for r in records if r["type"] == "metric"}
    assert metrics["val_by_length/acc"]["step_metric"] == "length" and "val_by_length/tok_acc" in metrics
    assert metrics["val/acc_len_8"]["options"]["hidden"] and not metrics["val/acc"].get("options", {}).get("hidden")
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert [h["length"] for h in history if "val_by_length/acc" in h] == list(range(1, 9))
    assert any("train/lr" in h for h in history)
    # the sweep reports a validation to Optuna at the x value W&B plots it at
    assert [h["trainer/global_step"] for h in history if "val/acc" in h] == [h["wandb_step"] for h in record.history]


def test_default_rows_fold_encoder_and_decoder_encodings_into_the_encoding():
    import yaml

    from pe_sweeps.compare.spec import default_rows

    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "sweeps/pe_study_mt.yaml").read_text())
    assert default_rows(spec) == "encoding"
    spec = {"parameters": {"model.arch.encoding": {"values": ["a"]}, "model.lr": {"values": [1, 2]}}}
    assert default_rows(spec) == "encoding,model.lr"
    # the --best-over key is chosen within each cell, so it is not a row (either spelling of its path)
    assert default_rows(spec, best_over="model.init_args.lr") == "encoding" == default_rows(spec, best_over="model.lr")


def test_holm_matches_the_hand_computed_step_down():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> monotone: 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # 0.5 x 2 capped at 1; 0.9 x 1 raised to 1 (monotone)


@pytest.mark.parametrize("values", [[1.0, 1.0, 0.9], [0.0, 0.0, 0.1], [1.0, 0.98], [0.0, 0.0, 0.0, 0.02, 0.0]])
@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_intervals_are_clipped_to_the_metric_range_and_the_clipping_shown(values, aggregate):
    cell = Cell([{}] * len(values), values, aggregate, bounds=(0.0, 1.0))
    low, high = cell.ci
    assert 0.0 <= low <= cell.center <= high <= 1.0
    free = Cell([{}] * len(values), values, aggregate)  # the same values, no range: nothing clipped
    clipped = (free.ci[0] < 0.0, free.ci[1] > 1.0)
    assert cell.interval.clipped == clipped and free.interval.clipped == (False, False)
    assert interval_text(cell).count("†") == sum(clipped)
    if aggregate == "mean":
        assert any(clipped)  # a t interval of values at the edge of [0, 1] crosses it
    else:  # the median of fewer than 6 seeds: [min, max] at its exact level, printed after it
        exact = 1 - 2.0 ** (1 - len(values))  # printed where more than 2 points from 95 % (n=5: 93.75 % is not)
        assert cell.ci == (min(values), max(values)) and cell.interval.level == (exact if exact < 0.93 else 0.95)
        assert interval_text(cell).endswith(f"] {exact:.0%}" if exact < 0.93 else "]")


@pytest.mark.parametrize("metric, expected", [("val/acc", (0, 1)), ("val/acc_ood", (0, 1)), ("val/loss", (0, math.inf)),
                                              ("val/ppl", (1, math.inf)), ("val/mcc", (-1, 1)),
                                              ("val/score", (-math.inf, math.inf))])  # fmt: skip
def test_metric_ranges(metric, expected):
    from lightning_modules.metrics import bounds

    assert bounds(metric) == expected


COVERAGE_REPLICATES = 200_000  # Monte-Carlo standard error of a 95 % coverage: 0.05 points


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_interval_coverage_is_what_its_label_says(n):
    """Issue 24, finding 1: on normal data the mean's Student-t interval covers the true mean 95 % of the
    time at every seed count (the percentile bootstrap it replaces: about 50 % at n = 2, 75 % at n = 3),
    and the median's order-statistic interval covers the true median at the level it is labelled with."""
    from pe_sweeps.compare.comparison import LEVEL, median_interval, t_interval

    rng = np.random.default_rng(n)
    values = rng.normal(loc=3.0, scale=2.0, size=(COVERAGE_REPLICATES, n))
    low, high = t_interval(values)
    assert abs(np.mean((low <= 3.0) & (3.0 <= high)) - LEVEL) < 0.02
    # the median's interval is a pair of order statistics fixed by n: read which from n ranks
    k_low, k_high, level = median_interval(list(range(n)))
    ordered = np.sort(values, axis=1)
    covered = np.mean((ordered[:, int(k_low)] <= 3.0) & (3.0 <= ordered[:, int(k_high)]))
    exact = 1 - 2 * stats.binom.cdf(int(k_low), n, 0.5)  # P(k_low < #values below the median <= k_high)
    assert abs(covered - exact) < 0.02 and exact == pytest.approx(level) and (level >= LEVEL) == (n >= 6)


def tupe_records() -> list[RunRecord]:
    """lr 1e-3: seeds 0.5, 0.6, 0.9 (mean 0.667, median 0.6); lr 1e-2: 0.7, 0.7, 0.1 (mean 0.5, median 0.7)."""
    accs = {0.001: [0.5, 0.6, 0.9], 0.01: [0.7, 0.7, 0.1]}
    return [rec("rope", seed=s, acc=a, lr=lr) for lr, values in accs.items() for s, a in enumerate(values)]


def test_numbers_carry_two_significant_digits_of_the_interval_width():
    wide = Cell([{}] * 3, [0.9, 0.8, 1.0])  # interval [0.65, 1.15]: width 0.5
    assert wide.decimals == 2 and cell_text(wide, 1, False) == "0.90 ± 0.10 (n=3) [0.65, 1.15] #1"
    narrow = Cell([{}] * 3, [0.5011, 0.5023, 0.5032])  # width about 0.002: two significant digits of it
    low, high = narrow.ci
    assert narrow.decimals == 1 - math.floor(math.log10(high - low)) == 4
    assert cell_number(narrow.center, narrow) == f"{narrow.center:.4f}"
    single = Cell([{}], [0.123456])  # one seed: no interval, three significant digits
    assert single.decimals is None and cell_text(single, 1, True) == "* 0.123 (n=1) #1"


def test_best_over_keeps_the_best_aggregate_per_cell_and_names_it():
    median = compare(tupe_records(), "val/acc", aggregate="median", best_over="model.lr")
    cell = median.cells["rope", "copy"]
    assert (cell.chosen, cell.center, cell.values) == ("0.01", pytest.approx(0.7), [0.7, 0.7, 0.1])
    assert "@0.01" in cell_text(cell, 1, False) and not median.excluded
    assert any(
        line.startswith("rope / copy: model.lr -> 0.01 (medians 0.001: 0.6, 0.01: 0.7)") for line in notes(median)
    )
    mean = compare(tupe_records(), "val/acc", best_over="model.lr")
    assert mean.cells["rope", "copy"].chosen == "0.001"  # the rule's aggregate decides
    loss = compare_metrics(tupe_records(), ["val/acc", "val/loss"], aggregate="median", best_over="model.lr")[1]
    assert loss.cells["rope", "copy"].chosen == "0.01"  # chosen on the first metric, not on the loss


def test_several_metrics_side_by_side_and_latex(tmp_path, capsys):
    write_records(tmp_path, grid())
    comps = compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/loss", "--format=latex"])
    assert [c.metric for c in comps] == ["val/acc", "val/loss"]
    latex = capsys.readouterr().out
    assert latex.startswith("\\begin{table}") and "\\toprule" in latex and latex.rstrip().endswith("\\end{table}")
    header = next(line for line in latex.splitlines() if line.startswith("encoding &"))
    assert (
        header == "encoding & copy val/acc & reverse val/acc & copy val/loss & reverse val/loss & mean rank val/acc "
        "& MRR val/acc & mean rank val/loss & MRR val/loss \\\\"
    )
    assert "\\textbf{0.90} &" in latex and "val\\_acc" not in header
    assert "95\\% Student-t interval of the mean" in latex
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/loss", "--format=json"])
    data = json.loads(capsys.readouterr().out)
    assert [c["metric"] for c in data["comparisons"]] == ["val/acc", "val/loss"]


def test_best_over_a_key_that_does_not_vary_is_one_line_exit_2(tmp_path, capsys):
    from pe_sweeps import cli

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
    ood = [replace(r, final={**r.final, "val/acc_ood": r.final["val/acc"] / 4}) for r in grid()]
    write_records(tmp_path, ood)
    assert side_by_side("val/acc", ood) == ["val/acc", "val/acc_ood"]
    assert side_by_side("val/acc_ood", ood) == ["val/acc_ood", "val/acc"]
    assert side_by_side("val/acc", grid()) == ["val/acc"] and side_by_side("val/loss", ood) == ["val/loss"]
    console = Console(file=io.StringIO(), width=400)
    print_comparison(str(tmp_path), None, "val/acc", console=console)
    assert "copy val/acc " in console.file.getvalue() and "copy val/acc_ood" in console.file.getvalue()
    assert "Pareto front" not in console.file.getvalue()  # the companion metric is shown, not an objective


def test_several_metrics_rank_by_the_declared_goal_and_show_their_pareto_front(tmp_path, capsys):
    """Per-metric statistics (ranks by the sweep file's goal when given, else by the name) and, for several
    metrics, the Pareto front of the rows' aggregates (Optuna's rule, per column)."""
    from pe_sweeps.compare.pareto import comparison_front

    cost = {"rope": 3.0, "alibi": 1.0, "none": 0.5}  # "cost" has no loss/ppl/error in its name: max by name
    records = [replace(r, final={**r.final, "val/cost": cost[r.encoding]}) for r in grid()]
    comps = compare_metrics(records, ["val/acc", "val/cost"], goals=["maximize", "minimize"])
    assert [c.goal for c in comps] == ["max", "min"] and comps[1].ranks["none", "copy"] == 1
    front = comparison_front(comps, ["maximize", "minimize"])
    assert set(front["copy"]) == {"rope", "alibi", "none"}  # each trades accuracy for cost
    assert set(front["reverse"]) == {"alibi", "none"}  # rope: less accurate and dearer than alibi
    assert compare(records, "val/cost").goal == "max"  # no declared goal: by the name
    write_records(tmp_path, records)
    comps = compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/cost", "--value=final"])
    shown = capsys.readouterr().out
    assert [c.metric for c in comps] == ["val/acc", "val/cost"] and "Pareto front" in shown
    assert "Holm" in shown or "Welch" in shown  # main's statistics under the side-by-side table


def test_report_plots_agree_on_colours_show_seed_bands_units_and_log_perplexity(tmp_path):
    """Issue 13, point 5: one colour per encoding in every plot; a band over seeds on per-length and
    per-context curves; units and the training length / context marked; perplexity on a log axis; SVG."""
    from matplotlib.colors import to_hex

    from pe_sweeps.compare.report import length_curves, point_chart, ppl_context, row_colors

    records = [replace(r, final={**r.final, "val/ppl_ctx_8": 3.0 + r.seed, "val/ppl_ctx_16": 50.0}) for r in grid()]
    for r in records:
        r.config["data"]["init_args"]["block_size"] = 8
    comp = compare(records, "val/acc")
    colors = {row: to_hex(c) for row, c in row_colors(comp).items()}
    points = point_chart(comp).axes[0]
    assert [to_hex(ln.get_color()) for ln in points.get_lines()] == [
        colors[r] for r in comp.rows if (r, "copy") in comp.cells
    ]
    for fig in (length_curves(comp), ppl_context(comp)):
        ax = fig.axes[0]
        named = {ln.get_label().split(" (n=")[0]: ln for ln in ax.get_lines()}
        lines = {label: to_hex(ln.get_color()) for label, ln in named.items() if label in colors}
        assert lines == {r: colors[r] for r in comp.rows if (r, "copy") in comp.cells}
        assert len(ax.collections) == len(lines)  # one seed band per row
        assert any(ln.get_linestyle() == "--" for ln in ax.get_lines())  # the training length / context
    length_ax, ppl_ax = length_curves(comp).axes[0], ppl_context(comp).axes[0]
    assert length_ax.get_xlabel() == "task length n" and ppl_ax.get_xlabel() == "context (tokens)"
    assert ppl_ax.get_yscale() == "log" and "training context 8 tokens" in [ln.get_label() for ln in ppl_ax.get_lines()]
    page = write_report(comp, tmp_path / "report")
    svgs = ["curves-val_acc.svg", "heatmap.svg", "length.svg", "points-val_acc.svg", "ppl_ctx.svg"]
    assert sorted(p.name for p in page.parent.glob("*.svg")) == svgs
    assert 'href="length.svg"' in page.read_text()


def test_csv_is_tidy_and_round_trips_through_pandas():
    """The label columns are named by their keys and lists are JSON: pandas reads back what json holds."""
    pd = pytest.importorskip("pandas")
    comps = [compare(grid(), "val/acc"), compare(grid(), "val/loss", rows="encoding,model.lr")]
    table = pd.read_csv(io.StringIO(to_csv(comps)))
    assert list(table.columns[:3]) == ["metric", "encoding", "task"] and "encoding,model.lr" in table.columns
    assert "row" not in table.columns and "col" not in table.columns
    cells = json.loads(to_json(comps[0]))["cells"]
    acc = table[table.metric == "val/acc"].reset_index()
    for cell, (_, row) in zip(cells, acc.iterrows()):
        assert (row.encoding, row.task, row["n"]) == (cell["row"], cell["col"], cell["n"])
        assert row["mean"] == pytest.approx(cell["mean"])
        assert json.loads(row["values"]) == cell["values"] and json.loads(row["seeds"]) == cell["seeds"]
        assert json.loads(row["ci_clipped"]) == cell["ci_clipped"]


def test_per_seed_values_in_csv_and_json_always_and_under_the_table_on_request(tmp_path, capsys):
    comp = compare(grid(), "val/acc")
    data = json.loads(to_json(comp))
    rope = next(c for c in data["cells"] if c["row"] == "rope" and c["col"] == "copy")
    assert rope["values"] == [0.9, 0.8, 1.0] and rope["seeds"] == [0, 1, 2] and rope["ci_clipped"] == [False, True]
    assert rope["ci_level"] == pytest.approx(0.798, abs=0.005) and data["interval"].startswith(
        "95% Student-t interval of the mean"
    )
    row = next(r for r in csv.DictReader(io.StringIO(to_csv(comp))) if r["encoding"] == "rope" and r["task"] == "copy")
    assert row["values"] == "[0.9, 0.8, 1.0]" and row["seeds"] == "[0, 1, 2]"
    assert "rope / copy [val/acc]: 0.9 (seed 0), 0.8 (seed 1), 1 (seed 2)" not in text_of(render_table(comp))
    write_records(tmp_path, grid())
    compare_main([f"--out_dir={tmp_path}", "--per_seed"])
    assert "rope / copy [val/acc]: 0.9 (seed 0), 0.8 (seed 1), 1 (seed 2)" in capsys.readouterr().out
    enough = compare([rec(seed=s, acc=0.5 + s / 100) for s in range(5)], "val/acc")
    assert not any(line.startswith("few seeds") for line in notes(enough))


def missing_worst() -> list[RunRecord]:
    """Rows a and b on three tasks; c lacks t3, where it would rank last."""
    values = {("a", "t1"): 0.9, ("b", "t1"): 0.8, ("c", "t1"): 0.95, ("a", "t2"): 0.9, ("b", "t2"): 0.8,
              ("c", "t2"): 0.85, ("a", "t3"): 0.5, ("b", "t3"): 0.9}  # fmt: skip
    return [rec(e, t, s, v + s / 100) for (e, t), v in values.items() for s in range(2)]


def test_a_row_missing_a_column_is_left_out_of_the_aggregates_and_named():
    """Issue 24, finding 2: averaged over the columns it has, c's MRR would be (1 + 1/2) / 2 = 0.75 and beat
    a's 0.67; it has no t3, so it gets no aggregate, is named, and a and b are ranked among themselves."""
    comp = compare(missing_worst(), "val/acc")
    assert comp.ranks["c", "t1"] == 1 and comp.ranks["c", "t2"] == 2  # its cells keep their ranks
    assert comp.missing == {"c": ["t3"]} and set(comp.mrr) == set(comp.mean_rank) == set(comp.iqm) == {"a", "b"}
    assert comp.mrr == {"a": pytest.approx(2.5 / 3), "b": pytest.approx(2 / 3)} and comp.rows == ["a", "b", "c"]
    assert comp.mean_rank == {"a": pytest.approx(4 / 3), "b": pytest.approx(5 / 3)}
    lines = notes(comp)
    assert "mean rank, MRR and IQM over the rows with every column; left out: c (no t3)" in lines
    header, rows = grid_of(comp)
    assert rows[-1][0] == "c" and rows[-1][2] == ["-", "-"]
    data = json.loads(to_json(comp))
    assert data["missing"] == {"c": ["t3"]} and set(data["iqm"]) == {"a", "b"}


def test_iqm_and_its_stratified_bootstrap_follow_rliable():
    from pe_sweeps.compare.across_tasks import iqm, iqm_interval, performance_profile

    assert iqm([[1, 2, 3, 4], [5, 6, 7, 8]]) == pytest.approx(4.5)  # 25 % trimmed: mean of 3, 4, 5, 6
    assert iqm([[8, 1], [3, 100, 5, 7, 2, 4]]) == pytest.approx(np.mean([3, 4, 5, 7]))
    # stratified: seeds are resampled within each task, so a resample always holds three 0s and three 1s (a
    # bootstrap over the six pooled runs would not)
    assert iqm_interval([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]) == (0.5, 0.5, 0.5)
    point, low, high = iqm_interval([[0.1, 0.3, 0.2], [0.6, 0.9, 0.7]])
    assert low < point < high and iqm_interval([[0.1, 0.3, 0.2], [0.6, 0.9, 0.7]]) == (point, low, high)
    taus = np.array([0.1, 0.5, 0.9])
    profile, low, high = performance_profile([[0.2, 0.4], [0.6, 0.8]], taus)
    assert profile.tolist() == [1.0, 0.5, 0.0] and np.all(low <= profile) and np.all(profile <= high)
    assert performance_profile([[0.2, 0.4], [0.6, 0.8]], taus, "min")[0].tolist() == [0.0, 0.5, 1.0]
    assert not compare(grid(), "val/acc").iqm  # two columns: no IQM (across_tasks.MIN_IQM_COLUMNS)
    three = grid() + [rec(e, "sort", s, 0.3 + s / 10) for e in ("rope", "alibi", "none") for s in range(2)]
    comp = compare(three, "val/acc")
    expected = iqm_interval([comp.cells["rope", c].values for c in comp.cols])
    assert comp.iqm["rope"] == expected and any(line.startswith("IQM over columns x seeds") for line in notes(comp))


def with_setup(record: RunRecord, **changes) -> RunRecord:
    """A copy of a record with dotted config paths changed (`trainer.max_steps=10`)."""
    record = replace(record, config=copy.deepcopy(record.config))
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = record.config
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return record


def test_identity_is_the_setup_allowlist():
    """Issue 24, finding 3: a run differing in a logging option stays in its cell; one differing in steps,
    precision or world size does not."""
    runs = [rec(seed=s) for s in range(3)]
    runs[2] = with_setup(runs[2], **{"trainer.log_every_n_steps": 7, "trainer.val_check_interval": 3,
                                     "data.init_args.num_workers": 4, "model.init_args.compile": True})  # fmt: skip
    assert compare(runs, "val/acc").cells["rope", "copy"].n == 3
    for change in ({"trainer.max_steps": 10}, {"trainer.precision": "bf16-mixed"}, {"trainer.num_nodes": 2}):
        odd = runs[:2] + [with_setup(rec(seed=2), **change), rec(seed=3)]
        comp = compare(odd, "val/acc")
        (dropped,) = comp.excluded
        assert comp.cells["rope", "copy"].n == 3 and dropped.reason.startswith(f"config differs: {next(iter(change))}=")
    world = runs[:2] + [replace(rec(seed=2), world_size=8), rec(seed=3)]  # the record's own field, from the trainer
    assert compare(world, "val/acc").excluded[0].reason == "config differs: world_size=8 (kept: missing)"


def test_the_data_seed_is_a_seed_not_a_setup():
    """The configs' data seed follows seed_everything, so seeds differ in it: one cell, not 'mixed configs' (the
    quick start's comparison was empty)."""
    runs = [with_setup(rec(seed=s), **{"data.init_args.seed": s}) for s in range(3)]
    comp = compare(runs, "val/acc")
    assert comp.cells["rope", "copy"].n == 3 and not comp.excluded


def test_a_column_mixing_setups_is_refused_in_one_line(tmp_path, capsys):
    from pe_sweeps import cli

    short = [with_setup(rec("alibi", seed=s), **{"trainer.max_steps": 10, "data.init_args.train_max_len": 16})
             for s in range(2)]  # fmt: skip
    records = [rec("rope", seed=s) for s in range(2)] + short
    message = (
        "column 'copy' mixes setups, refusing to rank them: alibi and rope differ in data.train_max_len (16 vs 4), "
        "trainer.max_steps (10 vs 100); split them with --cols task,KEY (or --rows), or select one study with --sweep"
    )
    with pytest.raises(ConfigError) as error:
        compare(records, "val/acc")
    assert str(error.value) == message
    write_records(tmp_path, records)
    with pytest.raises(SystemExit) as exit_info:
        cli.cli_main(["compare", f"--out_dir={tmp_path}"])
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip() == f"error: {message}"
    split = compare(records, "val/acc", cols="task,trainer.max_steps")  # one column per setup
    assert set(split.cols) == {"copy, 10", "copy, 100"}
    # a sweep's tuned parameters may differ between rows (a reseed study: each encoding's chosen lr)
    tuned = [rec("rope", seed=s) for s in range(2)] + [rec("alibi", seed=s, lr=0.01) for s in range(2)]
    with pytest.raises(ConfigError, match="differ in model.lr"):
        compare(tuned, "val/acc")
    assert compare(tuned, "val/acc", tuned=["model.lr"]).cells["alibi", "copy"].n == 2


def test_aggregates_only_over_columns_of_one_kind_of_run():
    lm = [with_setup(rec(e, "wikitext", s, 0.3), **{"model.class_path": "x.MaskedLM"}) for e in ("rope", "alibi")
          for s in range(2)]  # fmt: skip
    comp = compare(grid() + lm, "val/acc")
    assert not comp.mean_rank and not comp.mrr and not comp.iqm and comp.kinds["wikitext"] == "MaskedLM"
    assert (
        "no mean rank, MRR or IQM: the columns hold different kinds of run (M: copy, reverse; MaskedLM: wikitext); "
        "compare each kind on its own" in notes(comp)
    )
    assert comp.ranks["rope", "wikitext"] == 1.5  # each column is still ranked


@pytest.mark.parametrize("width", [250, 80, 60])
def test_the_table_never_splits_a_number_and_is_compact_when_narrow(width):
    """Issue 29.4: at 80 columns rich broke numbers and paths inside cells."""
    from pe_sweeps.compare.comparison import cell_number

    comp = compare(grid(), "val/acc")
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(render_table(comp))
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= width
    for cell in comp.cells.values():  # every number of every cell, whole on one line
        numbers = [cell_number(cell.center, cell)] + ([cell_number(x, cell) for x in cell.ci] if cell.n > 1 else [])
        for number in numbers:
            assert number in text, (number, width)
    compact = "compact cells for this terminal's width" in " ".join(text.split())
    assert compact == (width < 100) and (("(n=3)" in text) != compact)


def test_two_sweeps_compare_as_one(tmp_path, capsys):
    """`--sweep a,b`: a reproduction and a row added by a second sweep (ALiBi's t5_bias at another max_distance)
    in one table, the rows of each sweep's reseed groups merged; an unknown name is one line."""
    from pe_sweeps.compare.spec import merged_spec

    main = [replace(r, sweep="a") for r in grid()]
    added = [rec("t5_bias", seed=s, acc=0.5, sweep="b") for s in range(3)]
    write_records(tmp_path, [*main, *added, rec("rope", acc=0.1, sweep="c")])
    comp = compare_main([f"--out_dir={tmp_path}", "--sweep=a,b", "--format=json"])
    data = json.loads(capsys.readouterr().out)
    assert data["rows"] == ["encoding"] and comp.cells["t5_bias", "copy"].n == 3
    assert {row for row, _ in comp.cells} == {r.encoding for r in main} | {"t5_bias"}  # sweep c not read
    with pytest.raises(ConfigError, match="no runs of sweep 'd' under .*; sweeps found: a, b, c"):
        compare_main([f"--out_dir={tmp_path}", "--sweep=a,d"])
    options = "model.arch.encoding_options"
    specs = [{"metrics": [{"name": "val/ppl"}], "parameters": {"model.lr": {}}, "compare_rows": "encoding"},
             {"parameters": {options: {}}, "compare_rows": f"encoding,{options}"}]  # fmt: skip
    merged = merged_spec(specs)
    assert merged["compare_rows"] == "encoding,model.arch.encoding_options" and merged["metrics"] == [
        {"name": "val/ppl"}
    ]
    assert list(merged["parameters"]) == ["model.lr", "model.arch.encoding_options"] and merged["roles"] is None


def test_a_cell_lists_its_seeds_in_order_however_its_runs_finished():
    """Runs of parallel workers finish in any order: a cell's seeds (and the sum behind its mean) do not follow it
    (test_reseed_protocol_end_to_end saw [2, 1] once under load)."""
    runs = [replace(rec(seed=s, acc=0.1 * (s + 1)), updated_at=10.0 - s) for s in (2, 0, 1)]
    cell = compare(runs, "val/acc").cells["rope", "copy"]
    assert [r.seed for r in cell.records] == [0, 1, 2] and cell.values == [0.1, 0.2, 0.30000000000000004]


def test_a_row_key_set_to_null_is_a_row_and_an_absent_one_is_left_out():
    """ALiBi's reproduction beside its t5_bias `max_distance: 64` sweep: the other runs' `encoding_options: null`
    (the encoding's defaults) is their row value, not a missing key; a key a run's config lacks still is."""

    def with_options(seed, options):
        r = rec("t5_bias", seed=seed)
        arch = r.config["model"]["init_args"]["arch"]
        return replace(r, config={**r.config, "model": {**r.config["model"], "init_args": {
            **r.config["model"]["init_args"], "arch": {**arch, "encoding_options": options}}}})  # fmt: skip

    runs = [with_options(s, None) for s in range(2)] + [with_options(s, {"max_distance": 64}) for s in range(2)]
    comp = compare([*runs, rec("rope")], "val/acc", rows="encoding,model.arch.encoding_options")
    assert sorted(row for row, _ in comp.cells) == ["t5_bias, None", "t5_bias, {'max_distance': 64}"]
    assert [e.reason for e in comp.excluded] == ["no model.arch.encoding_options"]  # rec('rope') has no such key


TABLE_SHAPES = {
    "one row": [rec("rope", task, seed, 0.5 + seed / 10) for task in ("copy", "reverse") for seed in range(2)],
    "one column": [rec(encoding, "copy", seed, 0.5 + seed / 10) for encoding in ("rope", "alibi") for seed in range(2)],
    "one cell": [rec("rope", "copy", 0, 0.5)],
    "no cells (every run excluded)": [rec("rope", None, seed) for seed in range(2)],  # columns with no cell
    "an empty row name": [rec("", "copy", seed, 0.5) for seed in range(2)],  # a column whose one cell is ""
}


@pytest.mark.parametrize("width", [250, 60])
@pytest.mark.parametrize("shape", TABLE_SHAPES)
def test_every_table_shape_renders(shape, width):
    """Issue 42.6: a sweep whose runs were all excluded (no task) ended on `max() arg is an empty sequence`
    in table_for; one-row, one-column, no-cell and empty-cell tables all render, within the width."""
    comp = compare(TABLE_SHAPES[shape], "val/acc")
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(render_table(comp))
    text = console.export_text()
    # mean rank and MRR only over 2 columns or more with 2 rows or more: none of these shapes has them
    assert "mean rank" not in text and not comp.mean_rank and max(map(len, text.splitlines())) <= width
    for cell in comp.cells.values():
        assert cell_number(cell.center, cell) in text
    if not comp.cells:
        assert "no task" in text  # the exclusions are the caption


def test_a_failing_comparison_is_one_warning_line_never_an_exception(tmp_path, monkeypatch, capsys):
    """Issue 42.6: the end-of-sweep comparison must never change the sweep's exit status: whatever fails in
    it is one warning line naming the compare command."""
    import pe_sweeps.compare.command as compare_module

    write_records(tmp_path, grid())

    def broken(*args, **kwargs):
        raise ValueError("max() arg is an empty sequence")

    monkeypatch.setattr(compare_module, "render_table", broken)
    print_comparison(str(tmp_path), None, "val/acc", console=Console(file=io.StringIO()))
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: the comparison could not be printed (ValueError: max() arg is an empty sequence); the runs "
        f"are saved, compare them with: python cli.py compare --out_dir={tmp_path}"
    ], err
