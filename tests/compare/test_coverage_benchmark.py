"""benchmarks/coverage_table.py (issue 44.4, the coverage tables before/after and the false separations of the old
and new pair test) keeps running: its --quick smoke version prints all five tables, well formed, in a few seconds.
Claims checked on its output: every table has its header's columns and only proportions in [0, 100] %; the median's
printed level is its exact binomial one (n = 2: 50 %, n = 3: 75 %); on a cut per seed the seeds+examples interval
is the seed-only t interval (same coverage, same draws)."""

import re
from pathlib import Path

import pytest
from helpers import load_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tables():
    """{title: (header, rows)} of the benchmark's --quick output."""
    module = load_module("benchmarks/coverage_table.py")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module.main(["--quick"])
    found = {}
    for section in out.getvalue().split("### ")[1:]:
        title, _, body = section.partition("\n")
        lines = [line for line in body.splitlines() if line.startswith("|")]
        split = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
        found[title] = (split[0], split[2:])
    return found


def test_every_table_is_printed_and_well_formed(tables):
    assert [title.split(".")[0] for title in tables] == ["1", "2", "3", "4", "5"]
    for title, (header, rows) in tables.items():
        assert rows, title
        for row in rows:
            assert len(row) == len(header), (title, row)
            for value in re.findall(r"(-?[\d.]+) %", " ".join(row)):
                assert 0.0 <= float(value) <= 100.0, (title, row)


def test_median_prints_its_exact_level_and_per_seed_cuts_are_the_t_interval(tables):
    _, median_rows = next(v for k, v in tables.items() if k.startswith("2."))
    assert {(row[1], row[4]) for row in median_rows} == {("2", "50.0 %"), ("3", "75.0 %")}
    assert {row[3] for row in median_rows} == {"95.0 %"}  # before: always the nominal label
    header, cell_rows = next(v for k, v in tables.items() if k.startswith("4."))
    new, old = header.index("cut per seed: seeds+examples (new)"), header.index("cut per seed: seed-only t (old)")
    for row in cell_rows:
        assert row[old] == "-" if row[2] == "1" else row[new] == row[old], row
