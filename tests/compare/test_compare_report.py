"""`cli.py compare --report` and `--format latex` as a paper uses them (issue 29, point 3): a figure per
requested metric, axes, ticks and legends that need no edit, error bars that are the table's interval,
300-dpi PNG + SVG + PDF, and a LaTeX table with one number format per column and a caption.

Claims of docs/compare.md covered here:
- "`--report DIR` writes, for every metric shown, ...": test_the_report_has_a_figure_per_requested_metric
- "`compare --sweep NAME` shows every metric the sweep's ending shows":
  test_compare_sweep_defaults_to_the_metrics_its_ending_shows
- "error bars are the table's interval"; "losses and perplexities as points with their interval";
  "legends and panel titles in the run-name form"; "the task length n"; "log ticks as plain numbers";
  "PNG at 300 dpi, SVG and PDF": test_report_figures_need_no_edit
- "`--format latex`: one number format per column ... a caption naming n, the interval and the test":
  test_latex_has_one_number_format_per_column_and_a_caption
"""

import re
from dataclasses import replace

import pytest
from matplotlib.colors import to_hex
from PIL import Image
from test_compare import grid, rec, write_records

from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.render import to_latex
from pe_sweeps.compare.report import bar_chart, length_curves, ppl_context, write_report
from pe_sweeps.compare.statistics import compare, compare_metrics
from pe_sweeps.runs.manifest import write_manifest


def with_ood(records):
    return [replace(r, final={**r.final, "val/acc_ood": r.final["val/acc"] / 4}) for r in records]


def test_the_report_has_a_figure_per_requested_metric(tmp_path, capsys):
    write_records(tmp_path, with_ood(grid()))
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/acc_ood", f"--report={tmp_path / 'report'}"])
    page = (tmp_path / "report" / "index.html").read_text()
    for metric in ("val_acc", "val_acc_ood"):
        for plot in ("bars", "curves"):  # no history of val/acc_ood in these records: its curves are skipped
            if (plot, metric) != ("curves", "val_acc_ood"):
                assert f'alt="{plot}-{metric}.png"' in page
        assert f'alt="profile-{metric}.png"' in page
    assert "final val/acc_ood" in page and 'alt="length.png"' in page


def test_compare_sweep_defaults_to_the_metrics_its_ending_shows(tmp_path, capsys):
    """The quickstart sweep names val/acc; its ending shows val/acc and val/acc_ood, and so does compare."""
    write_records(tmp_path, [replace(r, sweep="quickstart") for r in with_ood(grid())])
    parameters = {"model.arch.encoding": {"values": ["rope"]}, "data.task": {"values": ["copy"]}}
    sweep = {"name": "quickstart", "metric": {"name": "val/acc", "goal": "maximize"}, "parameters": parameters}
    write_manifest(tmp_path, "quickstart", sweep, tmp_path / "quickstart.yaml", "sqlite:///x.db")
    comps = compare_main([f"--out_dir={tmp_path}", "--sweep=quickstart"])
    assert [c.metric for c in comps] == ["val/acc", "val/acc_ood"]
    shown = capsys.readouterr().out
    assert (
        "val/acc_ood (max/max)" in shown.replace("\n", " ") and "Pareto front" not in shown
    )  # the companion is shown, not an objective
    comp = compare_main([f"--out_dir={tmp_path}", "--sweep=quickstart", "--metric=val/acc"])
    assert comp.metric == "val/acc"  # asked for one: one


def test_report_figures_need_no_edit(tmp_path):
    records = [replace(r, final={**r.final, "val/ppl_ctx_8": 15.25 + r.seed, "val/ppl_ctx_16": 16.0}) for r in grid()]
    records += [rec("rope", seed=s, acc=0.7 + s / 10, lr=0.01) for s in range(3)]
    for r in records:
        r.config["data"]["init_args"]["block_size"] = 8
    acc, loss = compare_metrics(records, ["val/acc", "val/loss"], rows="encoding,model.lr")
    # error bars are the interval the table shows, the same numbers
    ax = bar_chart(acc).axes[0]
    shown = [r for r in acc.rows if (r, "copy") in acc.cells]
    segments = ax.collections[0].get_segments()  # the error bars' vertical lines, in row order
    for row, segment in zip(shown, segments):
        assert [segment[0][1], segment[1][1]] == pytest.approx(list(acc.cells[row, "copy"].ci))
    assert len(ax.patches) == len(shown)  # accuracy: bars from 0
    # legends and titles in the run-name form, not raw config keys or bare values
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert sorted(labels) == ["alibi-lr=0.001", "none-lr=0.001", "rope-lr=0.001", "rope-lr=0.01"]
    assert ax.get_title() == "copy"
    # a loss (lower is better, no meaningful zero): points with their interval, not bars from 0
    loss_ax = bar_chart(loss).axes[0]
    assert not loss_ax.patches and loss_ax.get_ylim()[0] > 0
    segments = [segment for lines in loss_ax.collections for segment in lines.get_segments()]
    rows = [r for r in loss.rows if (r, "copy") in loss.cells]
    for row, segment in zip(rows, segments):
        assert [segment[0][1], segment[1][1]] == pytest.approx(list(loss.cells[row, "copy"].ci))
    # the synthetic tasks' length axis is the task length n, and its boundary says so
    length = length_curves(acc).axes[0]
    assert length.get_xlabel() == "task length n"
    assert "trained on n ≤ 4" in [ln.get_label() for ln in length.get_lines()]
    assert "rope-lr=0.001" in [t.get_text() for t in length.get_legend().get_texts()]
    # perplexity: log axis, ticks as plain numbers
    fig = ppl_context(acc)
    fig.canvas.draw()
    ppl = fig.axes[0]
    ticks = [t.get_text() for t in ppl.get_yticklabels(which="both") if t.get_text()]
    assert ppl.get_yscale() == "log" and ticks and all(re.fullmatch(r"[0-9.]+", t) for t in ticks), ticks
    assert "training context 8 tokens" in [ln.get_label() for ln in ppl.get_lines()]
    # files: PNG at 300 dpi, SVG and PDF, all linked from the page
    page = write_report([acc, loss], tmp_path / "report")
    for name in ("bars-val_acc", "bars-val_loss", "length", "ppl_ctx"):
        png = page.parent / f"{name}.png"
        assert Image.open(png).info["dpi"] == pytest.approx((300, 300), abs=0.1)
        for suffix in (".svg", ".pdf"):
            assert png.with_suffix(suffix).stat().st_size > 0 and f'href="{name}{suffix}"' in page.read_text()
    from pe_sweeps.compare.report import figures_of

    assert {name for name, *_ in figures_of([acc, loss])} >= {"bars-val_acc.png", "bars-val_loss.png"}


def test_report_colours_stay_readable_per_row(tmp_path):
    """One colour per row in every figure, whatever the metric."""
    from pe_sweeps.compare.report import row_colors

    acc, loss = compare_metrics(grid(), ["val/acc", "val/loss"])
    assert row_colors(acc) == row_colors(loss)
    lines = {ln.get_label(): to_hex(ln.get_color()) for ln in length_curves(acc).axes[0].get_lines()}
    assert {row: lines[row] for row in acc.rows} == {r: to_hex(c) for r, c in row_colors(acc).items()}


def test_latex_has_one_number_format_per_column_and_a_caption():
    comps = compare_metrics(grid(), ["val/acc", "val/loss"])
    latex = to_latex(comps)
    body = latex.split("\\midrule")[1].split("\\bottomrule")[0]
    rows = [line.rstrip(" \\").split(" & ") for line in body.strip().splitlines()]
    for column in list(zip(*rows))[1:5]:  # the four metric columns
        decimals = {len(m[1]) for cell in column if cell != "-" for m in [re.search(r"\d+\.(\d+)", cell)]}
        assert len(decimals) == 1, column  # one number format per column
        assert not any("n=" in cell or "#" in cell or "[" in cell for cell in column)  # center only by default
    caption = re.search(r"\\caption\{(.*)\}", latex)[1]
    assert "n = 1 to 3 runs (seeds) per cell" in caption and "95\\% Student-t interval" in caption
    assert "Welch t-test" in caption and "Holm" in caption
    full = to_latex(comps, interval=True, rank=True)
    assert "[0.65, 1.00$^\\dagger$]" in full
    header = full.split("\\toprule")[1].split("\\midrule")[0]
    assert header.count("& rank &") == 4 and header.count("mean rank") == 2  # a rank column beside each column


@pytest.mark.parametrize("flag", ["--latex-interval", "--latex_rank"])
def test_latex_options_on_the_command_line(tmp_path, capsys, flag):
    write_records(tmp_path, grid())
    compare_main([f"--out_dir={tmp_path}", "--format=latex", flag])
    latex = capsys.readouterr().out
    assert ("[0.65, 1.00$^\\dagger$]" in latex) == (flag == "--latex-interval")
    assert ("& rank &" in latex.split("\\midrule")[0]) == (flag == "--latex_rank")


def test_one_seed_cells_keep_the_column_format():
    comp = compare(grid(), "val/acc")
    latex = to_latex(comp)
    assert "\\textbf{0.90}" in latex and " 0.05 " in latex.replace("\\\\", " ")  # none/reverse: one seed, 0.05
