"""docs/RESULTS.md's tables equal what `cli.py compare --from docs/results/NAME.json` prints (issue 30): a table to
check is preceded by a marker line naming its file and the compare options that printed it,

    <!-- results: docs/results/alibi.json --metric val/ppl_ctx_64,val/ppl_ctx_128 --format markdown -->

and every file under docs/results/ is named by at least one marker. `check_results_file` checks a markdown file;
the parametrised test runs it on each marker of docs/RESULTS.md, the unit test on a tiny file it builds.
"""

import difflib
import io
import math
import re
import shlex
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import load_module
from test_compare import grid, rec, write_records

from pe_core.errors import ConfigError
from pe_sweeps.compare.command import compare_main

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "RESULTS.md"
RESULTS_DIR = Path("docs") / "results"  # under the repository root
MARKER = re.compile(r"<!-- results: (?P<path>\S+)(?P<args>.*?) -->")


@dataclass
class Marker:
    """A `<!-- results: FILE ARGS -->` line: where it is, the saved runs and the compare options."""

    line: int  # 1-based
    path: str
    args: list[str]


def markers(md_path: Path) -> list[Marker]:
    lines = md_path.read_text().splitlines()
    return [Marker(i + 1, m["path"], shlex.split(m["args"])) for i, line in enumerate(lines)
            if (m := MARKER.fullmatch(line.strip()))]  # fmt: skip


def table_lines(lines: list[str]) -> list[str]:
    """The first markdown table in `lines` (blank lines before it skipped), trailing whitespace removed."""
    lines = [line.rstrip() for line in lines]
    start = next((i for i, line in enumerate(lines) if line), len(lines))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def printed_table(saved: Path, args: list[str]) -> list[str]:
    """The table `cli.py compare --from SAVED ARGS` prints."""
    out = io.StringIO()
    with redirect_stdout(out):
        compare_main(["--from", str(saved), *args])
    return table_lines(out.getvalue().splitlines())


def check_marker(marker: Marker, lines: list[str], root: Path) -> str | None:
    """Why the table after the marker is not what its compare prints (None when it is)."""
    where = f"line {marker.line} ({marker.path} {shlex.join(marker.args)})"
    try:
        expected = printed_table(root / marker.path, marker.args)
    except ConfigError as error:
        return f"{where}: compare failed: {error}"
    if not expected:
        return f"{where}: compare printed no markdown table (add --format markdown)"
    shown = table_lines(lines[marker.line :])
    if shown == expected:
        return None
    diff = difflib.unified_diff(shown, expected, "RESULTS.md", "compare --from", lineterm="")
    return f"{where}: the table differs from what compare prints:\n" + "\n".join(diff)


def check_results_file(md_path: Path, root: Path) -> list[str]:
    """Every marked table of `md_path` against its recomputation, and every JSON under root/docs/results/
    named by a marker; the problems found (none: it checks)."""
    lines = md_path.read_text().splitlines()
    found = markers(md_path)
    problems = [p for marker in found if (p := check_marker(marker, lines, root))]
    named = {(root / m.path).resolve() for m in found}
    saved = sorted((root / RESULTS_DIR).glob("*.json"))
    problems += [
        f"{p.relative_to(root)} is named by no marker in {md_path.name}" for p in saved if p.resolve() not in named
    ]
    return problems


NONE_YET = pytest.param(None, marks=pytest.mark.skip(reason="no <!-- results: --> marker in docs/RESULTS.md yet"))


@pytest.mark.parametrize("marker", markers(RESULTS) or [NONE_YET], ids=lambda m: f"line{m.line}" if m else "none")
def test_a_results_table_is_what_compare_prints_from_its_runs(marker):
    assert check_marker(marker, RESULTS.read_text().splitlines(), ROOT) is None


def test_every_saved_result_is_named_by_a_marker():
    named = {(ROOT / m.path).resolve() for m in markers(RESULTS)}
    assert [p.name for p in sorted((ROOT / RESULTS_DIR).glob("*.json")) if p.resolve() not in named] == []


def test_the_checker_passes_a_recomputed_table_and_fails_a_changed_cell(tmp_path):
    """A RESULTS-like file with a table saved by --save_runs checks; one changed cell, a file no marker names, a
    marker whose file is missing each fail, naming the line."""
    out_dir, saved = tmp_path / "out", tmp_path / RESULTS_DIR / "tiny.json"
    write_records(out_dir, [*grid(), rec("rope", seed=7, status="failed")])
    args = ["--metric", "val/acc,val/loss", "--format", "markdown"]
    text = io.StringIO()
    with redirect_stdout(text):
        compare_main([f"--out_dir={out_dir}", f"--save_runs={saved}", *args])
    table = table_lines(text.getvalue().splitlines())
    assert len(table) == 5 and "**" in table[2]  # header, rule, three rows
    md = tmp_path / "RESULTS.md"
    marker = f"<!-- results: {RESULTS_DIR / 'tiny.json'} {shlex.join(args)} -->"
    md.write_text("\n".join(["# Results", "", "Accuracy over seeds:", "", marker, "", *table, "", "- a footer"]) + "\n")
    assert check_results_file(md, tmp_path) == []

    changed = md.read_text().replace(table[3], re.sub(r"\d\.\d+", "0.999", table[3], count=1))
    md.write_text(changed)
    problems = check_results_file(md, tmp_path)
    assert (
        len(problems) == 1
        and problems[0].startswith("line 5 (docs/results/tiny.json --metric")
        and "0.999" in problems[0]
    )

    md.write_text(md.read_text().replace(re.sub(r"\d\.\d+", "0.999", table[3], count=1), table[3]))
    (tmp_path / RESULTS_DIR / "other.json").write_text(saved.read_text())
    md.write_text(md.read_text() + "\n<!-- results: docs/results/gone.json --format markdown -->\n\n| x |\n")
    assert check_results_file(md, tmp_path) == [
        "line 15 (docs/results/gone.json --format markdown): compare failed: "
        f"--from {tmp_path}/docs/results/gone.json: no such file (write one with `cli.py compare --save_runs FILE`)",
        "docs/results/other.json is named by no marker in RESULTS.md",
    ]


def test_ngram_floors_are_exact_on_a_closed_form_text():
    """scripts/ngram_perplexity.py (the ALiBi reproduction's precondition floors): on 'ab' repeated, add-one
    unigrams give perplexity 2 exactly, and bigrams, which know that a is followed by b, nearly 1."""
    module = load_module("scripts/ngram_perplexity.py")
    text = "ab" * 50
    assert module.ngram_perplexity(text, text, 1) == pytest.approx(2.0)
    # 50 'ab' scored (51/52 each: 50 seen + 1 over 50 'a' + 2 symbols) and 49 'ba' (50/51: 49 'b' continued)
    expected = math.exp(-(50 * math.log(51 / 52) + 49 * math.log(50 / 51)) / 99)
    assert module.ngram_perplexity(text, text, 2) == pytest.approx(expected)


def test_masked_lm_floor_is_exact_on_a_closed_form_text():
    """scripts/mlm_floor.py (the TUPE reproduction's context-free floor): two tokens equally frequent over a
    vocabulary of 2 give ln 2 per token (add-one changes nothing), and the floor copies the kept 10 %."""
    module = load_module("scripts/mlm_floor.py")
    tokens = [0, 1] * 50
    assert module.unigram_cross_entropy(tokens, tokens, 2) == pytest.approx(math.log(2))
    assert module.unigram_cross_entropy(tokens, [0], 3) == pytest.approx(-math.log(51 / 103))
    assert module.context_free_floor(1.0) == pytest.approx(0.9)
