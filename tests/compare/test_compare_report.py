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

import os
import re
import subprocess
from dataclasses import replace

import numpy as np
import pytest
from matplotlib.colors import to_hex
from PIL import Image
from test_compare import grid, rec, write_records

from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.comparison import t_interval
from pe_sweeps.compare.render import to_latex
from pe_sweeps.compare.report import length_curves, point_chart, ppl_context, write_report
from pe_sweeps.compare.statistics import compare, compare_metrics
from pe_sweeps.runs.manifest import write_manifest


def with_ood(records):
    return [replace(r, final={**r.final, "val/acc_ood": r.final["val/acc"] / 4}) for r in records]


def test_the_report_has_a_figure_per_requested_metric(tmp_path, capsys):
    write_records(tmp_path, with_ood(grid()))
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/acc_ood", f"--report={tmp_path / 'report'}"])
    page = (tmp_path / "report" / "index.html").read_text()
    for metric in ("val_acc", "val_acc_ood"):
        for plot in ("points", "curves"):  # no history of val/acc_ood in these records: its curves are skipped
            if (plot, metric) != ("curves", "val_acc_ood"):
                assert f'alt="{plot}-{metric}.png"' in page
        assert f"val/{metric[4:]}: a performance profile needs 3 columns or more (2 here)" in page
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
    # the lines are the interval the table shows, the same numbers; points, never bars from 0
    for comp in (acc, loss):
        ax = point_chart(comp).axes[0]
        shown = [r for r in comp.rows if (r, "copy") in comp.cells and comp.cells[r, "copy"].n > 1]
        segments = [s for lines in ax.collections for s in lines.get_segments() if s[0][0] == s[1][0]]
        for row, segment in zip(shown, segments):
            assert [segment[0][1], segment[1][1]] == pytest.approx(list(comp.cells[row, "copy"].ci))
        assert not ax.patches
    loss_ax = point_chart(loss).axes[0]
    assert loss_ax.get_ylim()[0] > 0 and loss_ax.get_ylabel() == "loss"
    # legends and titles in the run-name form, not raw config keys or bare values
    ax = point_chart(acc).axes[0]
    labels = [t.get_text().split("\n")[0].split(" (n=")[0] for t in ax.get_xticklabels()]
    assert sorted(labels) == ["alibi-lr=0.001", "none-lr=0.001", "rope-lr=0.001", "rope-lr=0.01"]
    assert ax.get_title() == "copy"
    # the synthetic tasks' length axis is the task length n, and its boundary says so
    length = length_curves(acc).axes[0]
    assert length.get_xlabel() == "task length n"
    assert "trained on n ≤ 4" in [ln.get_label() for ln in length.get_lines()]
    assert "rope-lr=0.001 (n=3)" in [t.get_text() for t in length.get_legend().get_texts()]
    # perplexity: log axis, ticks as plain numbers
    fig = ppl_context(acc)
    fig.canvas.draw()
    ppl = fig.axes[0]
    ticks = [t.get_text() for t in ppl.get_yticklabels(which="both") if t.get_text()]
    assert ppl.get_yscale() == "log" and ticks and all(re.fullmatch(r"[0-9.]+", t) for t in ticks), ticks
    assert "training context 8 tokens" in [ln.get_label() for ln in ppl.get_lines()]
    # files: PNG at 300 dpi, SVG and PDF, all linked from the page
    page = write_report([acc, loss], tmp_path / "report")
    for name in ("points-val_acc", "points-val_loss", "length", "ppl_ctx"):
        png = page.parent / f"{name}.png"
        assert Image.open(png).info["dpi"] == pytest.approx((300, 300), abs=0.1)
        for suffix in (".svg", ".pdf"):
            assert png.with_suffix(suffix).stat().st_size > 0 and f'href="{name}{suffix}"' in page.read_text()
    from pe_sweeps.compare.report import figures_of

    assert {name for name, *_ in figures_of([acc, loss])} >= {"points-val_acc.png", "points-val_loss.png"}


def test_report_colours_stay_readable_per_row(tmp_path):
    """One colour per row in every figure, whatever the metric."""
    from pe_sweeps.compare.report import row_colors

    acc, loss = compare_metrics(grid(), ["val/acc", "val/loss"])
    assert row_colors(acc) == row_colors(loss)
    lines = {ln.get_label().split(" (n=")[0]: to_hex(ln.get_color()) for ln in length_curves(acc).axes[0].get_lines()}
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


# ---- issue 45, point 5: figures a paper can use -------------------------------------------------------------


def with_token_accuracy(records):
    """The records with per-length token accuracy (`val/tok_acc_len_<n>`): above the exact match, as it is."""
    lengths = {2: 1.0, 4: 0.9, 8: 0.6}
    return [replace(r, final={**r.final, **{f"val/tok_acc_len_{n}": min(1.0, r.final["val/acc"] + (1 - t) / 2)
                                           for n, t in lengths.items()}}) for r in records]  # fmt: skip


@pytest.mark.parametrize(
    ("metric", "kind", "label"),
    [
        ("val/acc", None, "exact-match accuracy"),
        ("val/acc_ood", None, "exact-match accuracy beyond training length"),
        ("val/tok_acc_ood", None, "token accuracy beyond training length"),
        ("test/acc_len_32", None, "exact-match accuracy at length 32 (test)"),
        ("val/acc_se_len_8", None, "standard error of the exact-match accuracy at length 8"),
        ("val/ppl_ctx_512", None, "perplexity at context 512"),
        ("val/acc", "MaskedLMModel", "masked-token accuracy"),
        ("val/acc", "SequenceClassifier", "accuracy"),
        ("probe/abs_mae", None, "absolute-position probe MAE"),
        ("val/my_own_metric", None, "val/my_own_metric"),  # unknown: as it is, never guessed
    ],
)
def test_metric_keys_have_readable_labels(metric, kind, label):
    from pe_sweeps.compare.labels import metric_label

    assert metric_label(metric, kind) == label


def test_points_with_their_interval_and_n_never_zero_width_bars():
    """Each cell a point with the cell's own interval as a line (its `Cell.interval`), n under each row's name; a
    single seed a hollow point without a line, labelled n=1; readable axis labels, not metric keys."""
    from pe_sweeps.compare.report import point_chart

    comp = compare(grid(), "val/acc")
    fig = point_chart(comp)
    for ax, col in zip(fig.axes, comp.cols):
        rows = [r for r in comp.rows if (r, col) in comp.cells]
        assert not ax.patches  # no bars (a bar from 0 of n=1 drew a zero-width stub)
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks == [f"{r}\nn={comp.cells[r, col].n}" for r in rows]
        intervals = [s for c in ax.collections for s in c.get_segments() if s[0][0] == s[1][0]]  # vertical lines
        with_interval = [r for r in rows if np.isfinite(comp.cells[r, col].interval.low)]  # n = 1: none here
        assert len(intervals) == len(with_interval)
        for row, segment in zip(with_interval, intervals):
            interval = comp.cells[row, col].interval
            assert [segment[0][1], segment[1][1]] == pytest.approx([interval.low, interval.high])
        assert ax.get_ylabel() == "exact-match accuracy" and "val/acc" not in ax.get_ylabel()
        assert -0.031 <= ax.get_ylim()[0] and ax.get_ylim()[1] <= 1.031  # an accuracy's axis stays in [0, 1]
    reverse = fig.axes[comp.cols.index("reverse")]
    assert "none\nn=1" in [t.get_text() for t in reverse.get_xticklabels()]  # one seed: said, no line
    assert "interval" in " ".join(fig.get_suptitle().split()) and "n = seeds" in " ".join(fig.get_suptitle().split())


def test_exact_and_token_accuracy_vs_length_band_is_the_cells_interval_and_says_so():
    from pe_sweeps.compare.report import length_curves, token_length_curves

    comp = compare(with_token_accuracy(grid()), "val/acc")
    for draw, prefix, ylabel in ((length_curves, "val/acc_len_", "exact-match accuracy"),
                                 (token_length_curves, "val/tok_acc_len_", "token accuracy")):  # fmt: skip
        fig = draw(comp)
        ax = fig.axes[comp.cols.index("copy")]
        assert ax.get_ylabel() == ylabel and -0.031 <= ax.get_ylim()[0] and ax.get_ylim()[1] <= 1.031
        assert "band: 95% Student-t interval of the mean over seeds" in " ".join(
            fig.get_suptitle().split()
        )  # the band's meaning
        bands = [c for c in ax.collections if c.get_paths()]
        rope = comp.cells["rope", "copy"].records
        band = bands[comp.rows.index("rope")].get_paths()[0].vertices
        values = [r.final[f"{prefix}8"] for r in rope]
        low, high = (float(x) for x in t_interval(values))
        at_8 = sorted(y for x, y in band if x == 8)
        assert at_8[0] == pytest.approx(max(low, 0.0)) and at_8[-1] == pytest.approx(min(high, 1.0))
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "rope (n=3)" in labels and "trained on n ≤ 4" in labels
    assert token_length_curves(compare(grid(), "val/acc")) is None  # no token accuracy logged: not drawn


def test_encodings_by_lengths_heatmap():
    from pe_sweeps.compare.report import length_heatmap

    comp = compare(grid(), "val/acc")
    fig = length_heatmap(comp)
    ax = fig.axes[comp.cols.index("copy")]
    (image,) = ax.get_images()
    rows = [r for r in comp.rows if (r, "copy") in comp.cells]
    assert [t.get_text() for t in ax.get_yticklabels()] == rows
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "8"]
    data = image.get_array()
    for i, row in enumerate(rows):
        values = [r.final["val/acc_len_8"] for r in comp.cells[row, "copy"].records]
        assert data[i, 2] == pytest.approx(np.mean(values))
    texts = [t.get_text() for t in ax.texts]
    assert f"{data[0, 0]:.2f}" in texts  # the numbers are on the cells
    assert any(ln.get_linestyle() == "--" for ln in ax.get_lines())  # the training length


def test_performance_profile_only_over_three_columns_or_more():
    from pe_sweeps.compare.report import profile_plot

    assert profile_plot(compare(grid(), "val/acc")) is None  # two tasks: a degenerate profile
    third = [replace(r, task="sort") for r in grid() if r.task == "copy"]
    for r in third:
        r.config["data"]["init_args"]["task"] = "sort"
    comp = compare(grid() + third, "val/acc")
    assert len(comp.cols) == 3 and profile_plot(comp) is not None


def test_a_copy_only_report_has_no_empty_section(tmp_path):
    """A section appears only with its figure: a copy-only report shows no perplexity section, skipped or not."""
    records = [r for r in with_token_accuracy(grid()) if r.task == "copy"]
    page = write_report(compare(records, "val/acc"), tmp_path / "report").read_text()
    assert "Skipped" not in page and "Perplexity" not in page
    sections = re.findall(r"<section.*?</section>", page, flags=re.S)
    assert sections and all("<img " in s for s in sections)
    alts = re.findall(r'<img alt="([^"]+)"', page)
    assert alts == ["points-val_acc.png", "curves-val_acc.png", "length.png", "tok_length.png", "heatmap.png",
                    "tok_heatmap.png"]  # fmt: skip
    assert "performance profile needs 3 columns or more" in page  # not drawn, said once in a line


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell")
PAGE_CHECK = """<script>window.addEventListener('load', () => {
  const bad = [...document.images].filter(i => !(i.complete && i.naturalWidth > 0
    && i.getBoundingClientRect().width > 0)).map(i => i.alt);
  const empty = [...document.querySelectorAll('section')].filter(s => !s.querySelector('img')
    || s.querySelector('img').naturalWidth === 0).map(s => s.querySelector('h3')?.textContent || '?');
  const loose = [...document.querySelectorAll('h3')].filter(h => !h.closest('section')).length;
  document.body.setAttribute('data-images', document.images.length);
  document.body.setAttribute('data-sections', document.querySelectorAll('section').length);
  document.body.setAttribute('data-bad', bad.join(',') || 'none');
  document.body.setAttribute('data-empty', empty.join(',') || 'none');
  document.body.setAttribute('data-loose', loose);
});</script>"""


def headless_chromium() -> str:
    """The path of a Chromium on PATH; CI must have one, elsewhere the test skips with the script to install it."""
    import shutil

    browser = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if browser is None and os.environ.get("CI"):
        pytest.fail("CI must install Chromium (scripts/install_chromium.sh)")
    if browser is None:
        pytest.skip(f"no headless Chromium on PATH (looked for {', '.join(BROWSERS)}): scripts/install_chromium.sh")
    return browser


@pytest.mark.slow  # starts a browser
def test_report_renders_in_headless_chromium_every_image_loads_and_no_section_is_empty(tmp_path):
    """The page in a real browser, with a screenshot: every image decodes and takes space, every section holds its
    figure (no heading without one), every figure of a 3-task report is there, and the console shows no error."""
    third = [replace(r, task="sort") for r in grid() if r.task == "copy"]
    for r in third:
        r.config["data"]["init_args"]["task"] = "sort"
    records = with_token_accuracy(grid() + third)
    page = write_report(compare(records, "val/acc"), tmp_path / "report")  # 7 figures x 3 formats: most of its time
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", PAGE_CHECK + "</body>"))
    shot = tmp_path / "screenshot.png"
    argv = [headless_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
            "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-quic", f"--user-data-dir={tmp_path / 'profile'}",  # offline: no calls home, a new profile
            "--virtual-time-budget=5000", "--window-size=1280,2400", f"--screenshot={shot}", "--dump-dom",
            probe.as_uri()]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    images = re.search(r'data-images="(\d+)"', dom)
    assert images and int(images[1]) == len(list(page.parent.glob("*.png"))) > 0, dom[-500:]
    assert re.search(r'data-sections="(\d+)"', dom)[1] == images[1]  # one section a figure
    assert 'data-bad="none"' in dom and 'data-empty="none"' in dom and 'data-loose="0"' in dom
    alts = set(re.findall(r'<img alt="([^"]+)"', dom))
    assert alts == {"points-val_acc.png", "curves-val_acc.png", "profile-val_acc.png", "length.png", "tok_length.png",
                    "heatmap.png", "tok_heatmap.png"}  # fmt: skip
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "rror" in line or "Uncaught" in line], console
    screenshot = np.asarray(Image.open(shot).convert("L"))
    assert screenshot.shape == (2400, 1280) and (screenshot < 128).mean() > 0.01  # drawn, not a blank page
