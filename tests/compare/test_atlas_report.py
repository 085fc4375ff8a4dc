"""Issue 49, point 3: a result readable at an atlas's size. `compare --report` draws, from 8 columns on, one heatmap
of rows x columns (rows by IQM, best first; columns grouped by task category; a cell failing its precondition grey
with no number), and compare prints, under the table, each row's mean #rank per task category with the tasks it
counts (`--format json`: `category_ranks`).

Claims covered here:
- "atlas heatmap: rows in IQM order, the failed cells masked grey and unnumbered, PNG written":
  test_the_atlas_heatmap_ranks_rows_by_iqm_and_greys_failed_cells
- "per-category mean ranks: the mean of a row's column ranks over the category's ranked tasks, failed cells not
  counted": test_category_mean_ranks_are_the_hand_computed_ones
- "printed under the table, in markdown and json, not for columns that are not tasks":
  test_category_ranks_are_printed_under_the_table
"""

import json

import numpy as np
import pytest
from helpers import load_module
from helpers import record as make_record
from matplotlib.colors import to_rgba

from pe_sweeps.compare import report
from pe_sweeps.compare.atlas_figure import FAILED_GREY, row_order
from pe_sweeps.compare.categories import category_ranks, column_categories
from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.preconditions import parse_preconditions
from pe_sweeps.compare.report import atlas_plot, metric_plots
from pe_sweeps.compare.statistics import compare_metrics
from pe_sweeps.runs.records import load_records, write_record

# 8 registered tasks over 4 categories, so their categories resolve
TASKS = ["even_pairs", "parity_check", "reverse_string", "stack_manipulation", "copy", "odds_first", "addition",
         "lookup"]  # fmt: skip


def test_the_atlas_heatmap_ranks_rows_by_iqm_and_greys_failed_cells(tmp_path, monkeypatch):
    scale = load_module("benchmarks/compare_scale.py")
    runs = scale.write_runs(tmp_path, 4, len(TASKS), 2, np.random.default_rng(3), names=TASKS)
    assert runs == 64
    # one column's precondition, so that some rows fail it (no IQM) and the others keep theirs
    precondition = parse_preconditions("parity_check:val/acc >= 0.5", "--precondition")
    (comp,) = compare_metrics(load_records(tmp_path), ["val/acc"], preconditions=precondition)
    drawn = {name: draw for name, _, draw, _ in metric_plots(comp)}
    assert drawn["atlas-val_acc.png"] is atlas_plot  # a section of the report (its other figures are not drawn here)
    monkeypatch.setattr(report, "SUFFIXES", (".png",))  # the SVG and PDF are 1.5 s of the test's CPU
    monkeypatch.setattr(report, "DPI", 100)
    assert "data:image/png;base64," in report.figure_html(tmp_path, "atlas-val_acc.png", "atlas", atlas_plot(comp))
    assert (tmp_path / "atlas-val_acc.png").stat().st_size > 0
    ranked, others = row_order(comp)
    assert len(ranked) >= 2 and others, "the case must hold rows with and without an IQM"
    assert [comp.iqm[r][0] for r in ranked] == sorted((comp.iqm[r][0] for r in ranked), reverse=True)
    assert set(others) == set(comp.failed_rows)

    fig = atlas_plot(comp)
    ax = fig.axes[0]
    rows = [t.get_text().split()[0] for t in ax.get_yticklabels()]
    cols = [t.get_text() for t in ax.get_xticklabels()]
    assert rows == ranked + others
    categories = column_categories(comp)
    assert [categories[c] for c in cols] == sorted((categories[c] for c in cols), key=list(dict.fromkeys(
        ["regular", "context_free", "context_sensitive", "arithmetic", "retrieval"])).index)  # fmt: skip
    image = ax.collections[0]  # the cells' mesh
    data = image.get_array()
    failed = np.array([[(r, c) in comp.failed for c in cols] for r in rows])
    assert failed.any() and (np.ma.getmaskarray(data) == failed).all()
    assert np.allclose(image.cmap.get_bad(), to_rgba(FAILED_GREY)) and ax.get_facecolor() == to_rgba(FAILED_GREY)
    numbered = {(round(t.get_position()[1]), round(t.get_position()[0])) for t in ax.texts}
    assert numbered == {(i, j) for i, j in zip(*np.nonzero(~failed))}  # a number on every cell but the failed ones
    i, j = np.argwhere(~failed)[0]
    assert data[i, j] == pytest.approx(comp.cells[rows[i], cols[j]].center)
    labels = {t.get_text() for t in ax.texts} | {t.get_text() for t in fig.texts}
    assert {"regular", "context-free", "context-sensitive", "arithmetic", "retrieval"} <= labels


def rec(encoding: str, task: str, seed: int, value: float):
    config = {"seed_everything": seed, "model": {"class_path": "M", "init_args": {"arch": {"encoding": encoding}}},
              "data": {"class_path": "D", "init_args": {"task": task, "train_max_len": 4}}}  # fmt: skip
    return make_record(name=f"{task}-{encoding}-s{seed}", group=f"{task}/{encoding}", task=task, encoding=encoding,
                       seed=seed, subcommand="fit", status="finished", config=config, final={"val/acc": value},
                       best={"val/acc": value}, history=[], step=100, max_steps=100)  # fmt: skip


# 2 rows x 3 tasks in 2 categories (even_pairs, parity_check: regular; copy: context-sensitive), two seeds a cell
MEANS = {("rope", "even_pairs"): 0.9, ("rope", "parity_check"): 0.2, ("rope", "copy"): 0.8,
         ("alibi", "even_pairs"): 0.5, ("alibi", "parity_check"): 0.6, ("alibi", "copy"): 0.9}  # fmt: skip


def tiny(spread: float = 0.01) -> list:
    return [rec(e, t, s, m + (s - 0.5) * spread) for (e, t), m in MEANS.items() for s in (0, 1)]


def test_category_mean_ranks_are_the_hand_computed_ones():
    (comp,) = compare_metrics(tiny(), ["val/acc"])
    # ranks: even_pairs rope 1, alibi 2; parity_check alibi 1, rope 2; copy alibi 1, rope 2
    assert category_ranks(comp) == {"rope": {"regular": (1.5, 2), "context_sensitive": (2.0, 1)},
                                    "alibi": {"regular": (1.5, 2), "context_sensitive": (1.0, 1)}}  # fmt: skip
    precondition = parse_preconditions("parity_check:val/acc >= 0.3", "--precondition")
    (comp,) = compare_metrics(tiny(), ["val/acc"], preconditions=precondition)
    assert set(comp.failed) == {("rope", "parity_check")}  # rope's parity cell has no rank: counted nowhere
    assert category_ranks(comp) == {"rope": {"regular": (1.0, 1), "context_sensitive": (2.0, 1)},
                                    "alibi": {"regular": (1.5, 2), "context_sensitive": (1.0, 1)}}  # fmt: skip


def write_tiny(root) -> None:
    for i, record in enumerate(tiny()):
        write_record(root / "runs" / f"run-{i}" / "record.json", record)


def test_category_ranks_are_printed_under_the_table(tmp_path, capsys):
    write_tiny(tmp_path)
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc", "--format=markdown"])
    out = capsys.readouterr().out
    assert "| encoding | regular (2 tasks) | context_sensitive (1 task) |" in out
    assert "| alibi | 1.50 (2) | 1.00 (1) |" in out and "| rope | 1.50 (2) | 2.00 (1) |" in out
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc", "--format=table"])
    assert "mean #rank per task category" in capsys.readouterr().out
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc", "--format=json"])
    data = json.loads(capsys.readouterr().out)["category_ranks"]
    assert data["categories"] == {"copy": "context_sensitive", "even_pairs": "regular", "parity_check": "regular"}
    assert data["ranks"]["rope"]["context_sensitive"] == {"mean_rank": 2.0, "tasks": 1}
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc", "--format=json", "--cols=seed"])  # not tasks: none
    assert json.loads(capsys.readouterr().out)["category_ranks"] == {}
