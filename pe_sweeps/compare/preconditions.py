"""Preconditions of `cli.py compare`: what a cell must show before it is ranked and tested at all (issue 44, 6).

A model that never learned the task scores a constant model's share of the examples over every seed, a tight
interval that a table would otherwise rank. A precondition is declared beforehand, in the sweep file
(`compare: {precondition: "val/acc >= 0.9"}`, a string or a list of them) or with `--precondition`:

    METRIC OP NUMBER        e.g. `val/acc >= 0.9` (OP: >=, >, <=, <), on the cell's aggregate over seeds
    COL:METRIC OP NUMBER    for one column only (e.g. `reverse:val/acc >= 0.5`); a column's own preconditions
                            replace the general ones there
    baseline                beat the task's best constant output: the cell's interval of val/acc lies wholly
                            above the mean of its runs' val/acc_constant (the synthetic tasks log it: per
                            in-distribution length, the share of the evaluation examples whose answer is that
                            length's most frequent one); with one seed, its value above it

Several are separated by commas. It is judged on an in-distribution metric (`compare` refuses a
beyond-training-length one) and holds for every metric shown: the beyond-length companion's cell of a failed cell
fails too. This module parses and judges; compare/statistics.py leaves failed cells out of ranks, verdicts and
aggregates, compare/comparison.py and render.py mark them. Imported by the sweep file's check too (light: no
statistics here).
"""

import math
import operator
import re
import sys
from dataclasses import dataclass

from pe_core.errors import ConfigError

OPERATORS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
NEGATION = {">=": "<", ">": "<=", "<=": ">", "<": ">="}
BASELINE = "baseline"
BASELINE_METRIC = "val/acc"  # judged against the runs' CONSTANT_METRIC
CONSTANT_METRIC = "val/acc_constant"  # logged by the synthetic tasks (lightning_modules/synthetic_model.py)
SYNTAX = ("a precondition is METRIC OP NUMBER (OP: >=, >, <=, <), COL:METRIC OP NUMBER for one column, or baseline "
          "(beat the task's best constant output), several separated by commas")  # fmt: skip
PATTERN = re.compile(r"^(?:(?P<col>[^:<>=]+):)?\s*(?P<metric>[^\s<>=:]+)\s*(?P<op>>=|<=|>|<)\s*(?P<number>\S+)$")
MARK = "✗"  # marks a cell that fails its precondition


@dataclass(frozen=True)
class Precondition:
    """One declared precondition: `metric op threshold`, or the baseline (op and threshold None), for one
    column (`col`) or every column (None); `where` names where it was declared, for its errors."""

    text: str
    metric: str
    op: str | None = None
    threshold: float | None = None
    col: str | None = None
    where: str = "--precondition"

    @property
    def baseline(self) -> bool:
        return self.op is None

    def error(self, problem: str) -> ConfigError:
        return ConfigError(f"{self.where} {self.text!r}: {problem}")

    def failure(self, cell, constant=None) -> str | None:
        """Why `cell` (compare/comparison.py Cell, of this precondition's metric) fails it; None if it passes.
        `constant`: the cell of the runs' constant-output accuracy, for the baseline."""
        center = cell.center
        if not self.baseline:
            if OPERATORS[self.op](center, self.threshold):
                return None
            return f"{self.metric} {cell.aggregate} {center:.4g} {NEGATION[self.op]} {self.threshold:g}"
        floor = float(sum(constant.values) / len(constant.values))
        low = cell.interval.low if cell.n > 1 else center
        if low > floor:
            return None
        shown = f"{center:.4g}" + (f" [{cell.interval.low:.4g}, {cell.interval.high:.4g}]" if cell.n > 1 else "")
        return f"{self.metric} {cell.aggregate} {shown} does not beat the best constant output {floor:.4g}"


def parse_one(text: str, where: str) -> Precondition:
    text = text.strip()
    head, _, rest = text.rpartition(":") if text.endswith(BASELINE) else ("", "", text)
    if rest.strip() == BASELINE:
        return Precondition(text, BASELINE_METRIC, col=head.strip() or None, where=where)
    found = PATTERN.match(text)
    try:
        threshold = float(found["number"]) if found else math.nan
    except ValueError:
        threshold = math.nan
    if not math.isfinite(threshold):
        raise ConfigError(f"{where} {text!r}: {SYNTAX}")
    col = found["col"].strip() if found["col"] else None
    return Precondition(text, found["metric"], found["op"], threshold, col, where)


def parse_preconditions(declared, where: str) -> list[Precondition]:
    """The preconditions of `declared` (a string of comma-separated ones, or a list of strings); one line
    naming `where` and the syntax for anything else."""
    if isinstance(declared, str):
        texts = declared.split(",")
    elif isinstance(declared, list) and declared and all(isinstance(t, str) for t in declared):
        texts = [part for t in declared for part in t.split(",")]
    else:
        raise ConfigError(f"{where} {declared!r}: {SYNTAX}")
    return [parse_one(t, where) for t in texts]


def for_column(preconditions: list[Precondition], col: str) -> list[Precondition]:
    """The preconditions a column's cells must meet: its own where declared, else the general ones."""
    own = [p for p in preconditions if p.col == col]
    return own or [p for p in preconditions if p.col is None]


def check_columns(preconditions: list[Precondition], cols: list[str]) -> None:
    """Every per-column precondition given on the command line names a column of the comparison (a typo there is
    one line). A sweep file declares one per column it will have: those whose column has no runs yet (one part of
    an atlas, an unfinished sweep) are skipped, with one note line naming how many."""
    waiting = []
    for p in preconditions:
        if p.col is not None and p.col not in cols:
            if p.where == "--precondition":
                raise p.error(f"no column {p.col!r}; columns: {', '.join(cols)}")
            waiting.append(p.col)
    if waiting:
        shown = ", ".join(sorted(set(waiting))[:5]) + (", ..." if len(set(waiting)) > 5 else "")
        print(f"note: {len(set(waiting))} column(s) the sweep file's preconditions name have no runs yet ({shown}); "
              "their preconditions are skipped", file=sys.stderr)  # fmt: skip


def failures(preconditions: list[Precondition], keys, cells_of) -> dict[tuple[str, str], str]:
    """{(row, col): why it fails} over the cells `keys`; `cells_of(metric)` gives that metric's cells
    {(row, col): Cell} (the same runs and --best-over choice), or None when no run logged it."""
    check_columns(preconditions, sorted({col for _, col in keys}))
    failed = {}
    for row, col in keys:
        for p in for_column(preconditions, col):
            cells = cells_of(p.metric)
            constants = cells_of(CONSTANT_METRIC) if p.baseline else {}
            for metric, found in ((p.metric, cells), (CONSTANT_METRIC, constants)):
                if found is None:
                    raise p.error(f"no run has {metric}")
            if (row, col) not in cells or (p.baseline and (row, col) not in constants):
                why = f"no {p.metric if (row, col) not in cells else CONSTANT_METRIC} in this cell"
            else:
                why = p.failure(cells[row, col], constants.get((row, col)))
            if why:
                failed[row, col] = why
                break
    return failed
