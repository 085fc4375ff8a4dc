"""What `cli.py compare` prints around its numbers (issue 45.2): the table first, then a short legend naming the
method once and one verdict line per column; aggregates only where they are defined; the full methodology on
`--explain`; a LaTeX float holding the table and its caption only; every width from 60 to 200 columns.

Claims of docs/compare.md covered here:
- "the table first, then a legend of a few lines (the interval, the test and its family, the marks) and per column
  the verdict of the best row against the runner-up": test_the_table_comes_first_then_a_short_legend
- "mean rank and MRR need two columns or more, the IQM three": test_aggregates_only_where_they_are_defined
- "--explain prints the full methodology": test_explain_prints_everything_the_notes_said
- "--format latex prints the float only (exclusions on stderr)": test_latex_is_the_float_and_its_caption_only
"""

import io
import re

import pytest
from rich.console import Console
from test_compare import rec, write_records

from pe_sweeps.compare.command import compare_main
from pe_sweeps.compare.comparison import cell_number
from pe_sweeps.compare.render import render_table, to_markdown
from pe_sweeps.compare.statistics import compare, compare_metrics


def quickstart() -> list:
    """The quick start's shape: 3 encodings x copy x 2 seeds, val/acc and val/acc_ood, one stale running run."""
    values = {"rope": [(0.98, 0.31), (0.97, 0.28)], "t5_bias": [(0.99, 0.52), (0.96, 0.47)],
              "learned": [(0.95, 0.05), (0.93, 0.07)]}  # fmt: skip
    records = [rec(e, "copy", s, a, final={"val/acc": a, "val/acc_ood": o}) for e, pairs in values.items()
               for s, (a, o) in enumerate(pairs)]  # fmt: skip
    return records + [rec("rope", "copy", 2, 0.5, status="running", final={"val/acc": 0.5, "val/acc_ood": 0.1})]


def four_by_two() -> list:
    """4 encodings x 2 tasks x 3 seeds, two metrics."""
    base = {"rope": (0.95, 0.3), "t5_bias": (0.97, 0.4), "learned": (0.9, 0.05), "alibi": (0.93, 0.35)}
    return [rec(e, t, s, a + 0.01 * s, final={"val/acc": a + 0.01 * s, "val/acc_ood": o - 0.01 * s})
            for t in ("copy", "reverse") for e, (a, o) in base.items() for s in range(3)]  # fmt: skip


def printed(renderable, width: int = 80) -> list[str]:
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(renderable)
    return console.export_text().splitlines()


def table_end(lines: list[str]) -> int:
    """The index of the line after the last table's bottom border."""
    return max(i for i, line in enumerate(lines) if line.startswith("└")) + 1


def test_the_table_comes_first_then_a_short_legend():
    """The quick start printed 54 lines at 80 columns, 40 of them notes: the interval's method twice, an IQM 'with
    50,000 resamples' over one column, mean rank and MRR of one task, the exclusion twice."""
    comps = compare_metrics(quickstart(), ["val/acc", "val/acc_ood"])
    lines = printed(render_table(comps))
    assert lines[1].startswith("┏") or lines[0].startswith("┏")  # the title, then the table
    legend = lines[table_end(lines) :]
    flat = " ".join(" ".join(legend).split())
    assert len(lines) <= 22 and len(legend) <= 13, "\n".join(lines)  # 54 and 46 before
    assert flat.count("Student-t") == 1 and flat.count("status running") == 1  # said once for both metrics
    assert "50,000" not in flat and "IQM" not in flat and "mean rank" not in "\n".join(lines)
    assert "Holm over the 6 tests" in flat and "alpha 0.05" in flat and "--explain" in flat
    assert "* best in column" in flat and "† clipped to the metric's range [0, 1]" in flat
    verdicts = [line for line in legend if line.startswith("copy ")]
    assert len(verdicts) == 2 and "below: best vs runner-up" in flat  # one per column x metric


def test_aggregates_only_where_they_are_defined(monkeypatch):
    """Mean rank and MRR over one column are its rank; an IQM of one or two columns is a trimmed mean of a handful
    of runs (its bootstrap covers 51-75 % at 1 column x 2-3 seeds); a single row has nothing to compare and was
    bootstrapped all the same."""
    import pe_sweeps.compare.statistics as statistics

    def values(columns, rows):
        names = ["rope", "alibi", "nope"][:rows]
        return [rec(e, f"t{c}", s, 0.5 + r / 10 + c / 100 + s / 50) for r, e in enumerate(names)
                for c in range(columns) for s in range(3)]  # fmt: skip

    one_column = compare(values(1, 3), "val/acc")
    assert not one_column.mean_rank and not one_column.mrr and not one_column.iqm
    assert one_column.rows == ["nope", "alibi", "rope"]  # still ordered by their rank in the one column
    two = compare(values(2, 3), "val/acc")
    assert set(two.mean_rank) == set(two.mrr) == {"rope", "alibi", "nope"} and not two.iqm
    three = compare(values(3, 3), "val/acc")
    assert set(three.iqm) == {"rope", "alibi", "nope"}
    assert "mean rank" not in to_markdown(one_column).splitlines()[0]
    assert "mean rank" in to_markdown(two).splitlines()[0]

    def no_bootstrap(*args, **kwargs):
        raise AssertionError("a single-row table is bootstrapped")

    monkeypatch.setattr(statistics, "iqm_interval", no_bootstrap)
    single = compare(values(3, 1), "val/acc")
    assert not single.mean_rank and not single.iqm
    text = "\n".join(printed(render_table(single), 120))
    assert "mean rank" not in text and text.count("nothing to compare") <= 1


def explain_fixture():
    values = {"rope": (0.9, 0.8, 0.7), "alibi": (0.6, 0.65, 0.5), "none": (0.3, 0.2, 0.1)}
    records = [rec(e, t, s, v[i] + s / 50) for e, v in values.items()
               for i, t in enumerate(("copy", "reverse", "sort")) for s in range(3)]  # fmt: skip
    return records + [rec("rope", "copy", 7, 0.0, status="running")]


# what the notes under the table said for explain_fixture before issue 45.2 (legend, notes and protocol lines)
OLD_NOTES = [
    "*: best in column (max of final val/acc); mean ± std (n) [95% Student-t interval of the mean over seeds "
    "(scipy.stats.t, n-1 degrees of freedom); its real level at the cell's shape (skewed near a bound of the metric's "
    "range; simulated, compare/coverage.py) printed after it where more than 2 points from 95%; clipped to the "
    "metric's range [0, 1] († marks a clipped end) (no per-example outcomes)] #rank in column; digits: two "
    "significant digits of the interval's width",
    "copy: rope (0.920) vs runner-up alibi (0.620): Welch t-test over seeds p=5.2e-05, Holm p=0.00041, TOST Holm p=1: "
    "rope better than alibi; the column's 3 pairs: 3 better",
    "reverse: rope (0.820) vs runner-up alibi (0.670): Welch t-test over seeds p=0.00078, Holm p=0.0016, TOST Holm "
    "p=1: rope better than alibi; the column's 3 pairs: 3 better",
    "sort: rope (0.720) vs runner-up alibi (0.520): Welch t-test over seeds p=0.00026, Holm p=0.001, TOST Holm p=1: "
    "rope better than alibi; the column's 3 pairs: 1 better, 2 precondition failed",
    "✗: fails the precondition val/acc >= 0.15 (declared with --precondition on the command line): no rank, its pairs "
    "untested (precondition failed), its row left out of mean rank, MRR and IQM; none / sort: val/acc mean 0.12 < 0.15",
    "few seeds (n < 5 in 9 of 9 cells): intervals are wide by design",
    "mean rank, MRR and IQM over the rows with every column passing its precondition; left out: none (precondition "
    "failed in sort)",
    "IQM over columns x seeds [rliable's nominal 95% stratified percentile bootstrap (Agarwal et al. 2021), seeds "
    "resampled within each column, 50,000 resamples, RNG seed 0; its real coverage at 3 columns x 3 seeds, simulated "
    "on normal data: 86%]: alibi 0.61 [0.598, 0.622], rope 0.82 [0.808, 0.832]",
    "excluded 1 run(s) [val/acc]:",
    "rope / copy: 1 x status running",
    "*: best in column (min of final val/loss); mean ± std (n) [95% Student-t interval of the mean over seeds "
    "(scipy.stats.t, n-1 degrees of freedom); its real level at the cell's shape (skewed near a bound of the metric's "
    "range; simulated, compare/coverage.py) printed after it where more than 2 points from 95%; clipped to the "
    "metric's range [0, inf] († marks a clipped end) (no per-example outcomes)] #rank in column; digits: two "
    "significant digits of the interval's width",
    "copy: rope (1.080) vs runner-up alibi (1.380): Welch t-test over seeds p=5.2e-05, Holm p=0.00041, TOST Holm p=1: "
    "rope better than alibi; the column's 3 pairs: 3 better",
    "IQM over columns x seeds [rliable's nominal 95% stratified percentile bootstrap (Agarwal et al. 2021), seeds "
    "resampled within each column, 50,000 resamples, RNG seed 0; its real coverage at 3 columns x 3 seeds, simulated "
    "on normal data: 86%]: alibi 1.39 [1.378, 1.402], rope 1.18 [1.168, 1.192]",
    "excluded 1 run(s) [val/loss]:",
    "tests: per pair of rows in a column, Welch's t-test over seeds, Holm-adjusted over one family: the 14 tests of "
    "every pair x column x metric shown; alpha 0.05",
    "verdicts: better / worse: Holm p < 0.05; equivalent within ±m: two one-sided Welch tests (TOST), Holm p < 0.05, "
    "margin val/acc ±0.05, val/loss ±0.05 (declared with --margin on the command line); otherwise inconclusive",
]


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_explain_prints_everything_the_notes_said(tmp_path, capsys, fmt):
    """Nothing of the old notes is lost: --explain prints each of them; without it, none of the long ones."""
    write_records(tmp_path, explain_fixture())
    args = [f"--out_dir={tmp_path}", "--metric=val/acc,val/loss", "--margin=0.05", "--precondition=val/acc >= 0.15",
            f"--format={fmt}"]  # fmt: skip
    compare_main([*args, "--explain"])
    flat = " ".join(capsys.readouterr().out.replace("\n- ", " ").split())
    for note in OLD_NOTES:  # markdown marks the best cell bold, and said so
        note = note.replace("*: best", "bold: best") if fmt == "markdown" else note
        assert " ".join(note.split()) in flat, note
    compare_main(args)
    short = " ".join(capsys.readouterr().out.split())
    assert "scipy.stats.t, n-1 degrees of freedom" not in short and "50,000" not in short
    assert "IQM" in short and "--explain" in short  # 3 columns: the IQM stays, one line a metric


def test_latex_is_the_float_and_its_caption_only(tmp_path, capsys):
    """`--format latex` put ~10 lines of notes inside the float, 'excluded 1 run(s) ... status running' among them."""
    write_records(tmp_path, quickstart())
    compare_main([f"--out_dir={tmp_path}", "--metric=val/acc,val/acc_ood", "--format=latex"])
    captured = capsys.readouterr()
    latex = captured.out.strip().splitlines()
    assert latex[0] == r"\begin{table}[t]" and latex[-1] == r"\end{table}"
    between = latex[latex.index(r"\end{tabular}") + 1 : -1]
    assert between == [] and "excluded" not in captured.out and r"\par" not in captured.out
    assert "excluded 1 run(s)" in captured.err and "status running" in captured.err
    caption = re.search(r"\\caption\{(.*)\}", captured.out)[1]
    assert "Student-t" in caption and "Holm" in caption and "runner-up" in caption
    assert "mean rank" not in captured.out  # one column: no mean rank, no MRR


def test_markdown_keeps_a_short_legend_under_the_table():
    comps = compare_metrics(quickstart(), ["val/acc", "val/acc_ood"])
    lines = to_markdown(comps).splitlines()
    table = [line for line in lines if line.startswith("|")]
    legend = [line for line in lines if line.startswith("- ")]
    assert len(table) == 5 and lines[: len(table)] == table and 3 <= len(legend) <= 8
    flat = " ".join(" ".join(legend).split())
    assert flat.count("Student-t") == 1 and flat.count("status running") == 1


@pytest.mark.parametrize("width", [60, 80, 120, 200])
@pytest.mark.parametrize("records", [quickstart, four_by_two])
def test_the_comparison_fits_the_terminal_and_splits_no_token(width, records):
    """4 rows x 2 tasks x 2 metrics at 80 columns: the side-by-side table, 9 columns, was cut at the right edge
    (`MRR val/acc_ood` gone, `encodin` / `g` and `val/acc_` / `ood` split); one table a metric now fits."""
    comps = compare_metrics(records(), ["val/acc", "val/acc_ood"])
    lines = printed(render_table(comps), width)
    text = "\n".join(lines)
    assert max(map(len, lines)) <= width, text
    words = set(text.split())
    for comp in comps:
        for cell in comp.cells.values():
            for number in [cell_number(cell.center, cell), *(cell_number(x, cell) for x in cell.ci)]:
                assert any(number in word for word in words), (number, text)
        for name in [*comp.rows, *comp.cols, *comp.row_keys]:
            assert name in words, (name, text)
        assert comp.metric in text
    if records is four_by_two:
        assert text.count("MRR") == 2, text  # each metric's mean rank and MRR shown
