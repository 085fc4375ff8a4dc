"""Rewrite each marked table of docs/RESULTS.md with what `cli.py compare --from FILE ARGS` prints now.

A table is preceded by a marker line `<!-- results: docs/results/NAME.json ARGS -->` (tests/compare/test_results.py
checks that every such table is what compare prints). When compare's statistics change (e.g. a cell's interval now
prints its real level), run this and read the diff before committing: only the statistics may move, never a value.

    python scripts/refresh_results.py            # rewrite docs/RESULTS.md in place, print how many tables changed
    python scripts/refresh_results.py --check    # exit 1 when a table differs
"""

import io
import re
import shlex
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pe_sweeps.compare.command import compare_main  # noqa: E402

MARKER = re.compile(r"<!-- results: (?P<path>\S+)(?P<args>.*?) -->")


def printed_table(path: str, args: list[str]) -> list[str]:
    """The first markdown table `compare --from PATH ARGS` prints."""
    out = io.StringIO()
    with redirect_stdout(out):
        compare_main(["--from", str(ROOT / path), *args])
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def refresh(lines: list[str]) -> tuple[list[str], int]:
    """`lines` with every marked table replaced by compare's; and how many changed."""
    out, changed, i = [], 0, 0
    while i < len(lines):
        out.append(lines[i])
        found = MARKER.fullmatch(lines[i].strip())
        i += 1
        if not found:
            continue
        while i < len(lines) and not lines[i].strip():  # blank lines before the table
            out.append(lines[i])
            i += 1
        start = i
        while i < len(lines) and lines[i].startswith("|"):
            i += 1
        table = printed_table(found["path"], shlex.split(found["args"]))
        changed += [line.rstrip() for line in lines[start:i]] != table
        out.extend(table)
    return out, changed


def main(argv: list[str]) -> int:
    path = ROOT / "docs" / "RESULTS.md"
    lines, changed = refresh(path.read_text().splitlines())
    if "--check" in argv:
        print(f"{changed} table(s) differ from what compare prints")
        return int(changed > 0)
    path.write_text("\n".join(lines) + "\n")
    print(f"rewrote {changed} table(s) of {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
