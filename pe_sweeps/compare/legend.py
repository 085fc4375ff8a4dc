"""What `cli.py compare` prints under its table: a short legend (`short_legend`) that names the cells' form, the
interval and the tests once, then one verdict line per column (its best row against the runner-up), the
exclusions and the warnings, each said once however many metrics are shown; and, with `--explain`, the full
methodology (`methodology`: every note of compare/comparison.py, the protocol, the per-seed values)."""

import math
from collections import Counter

from pe_sweeps.compare.comparison import (
    CLIPPED,
    FEW_SEEDS,
    LEVEL,
    Comparison,
    fmt,
    legend,
    notes,
    protocol_lines,
    seed_lines,
)
from pe_sweeps.compare.coverage import TOLERANCE
from pe_sweeps.compare.preconditions import MARK
from pe_sweeps.compare.statistics import verdict_text

EXPLAIN = "--explain: the full methodology; --format json: every pair's test"
WORDS = ("better", "worse", "equivalent", "inconclusive", "not testable", "precondition failed")


def methodology(comps: list[Comparison], best: str = "*", compact: bool = False, per_seed: bool = False) -> list[str]:
    """Everything the table rests on (`--explain`): per metric its cells' legend with the interval's full method,
    each column's tests, preconditions, aggregates and exclusions; the protocol once; the per-seed values."""
    lines = [line for comp in comps for line in [legend(comp, best), *notes(comp)]]  # the cells' full form
    lines += protocol_lines(comps)
    if compact:
        lines.append("compact cells for this terminal's width: mean [interval] (a wider terminal, --format csv or "
                     "json add std, n and ranks)")  # fmt: skip
    return lines + ([line for comp in comps for line in seed_lines(comp)] if per_seed else [])


def short_legend(comps: list[Comparison], best: str = "*", compact: bool = False, per_seed: bool = False) -> list[str]:
    """The lines under the table: cells and marks, the interval, the tests (one line each, shared by the metrics),
    per column its verdict, then what the reader must not miss (exclusions, failed preconditions, selection on a
    beyond-length metric, rows left out of the aggregates, the IQM where defined) and where the rest is."""
    many = len(comps) > 1
    lines = [cells_line(comps, best, compact), interval_line(comps)]
    lines += [tests_line(comps)] if tests_line(comps) else []
    lines += [line for comp in comps for col in comp.cols if (line := verdict_line(comp, col, many))]
    if not any(comp.pairs.get(col) for comp in comps for col in comp.cols):
        lines.append("one row per column: nothing to compare")
    lines += [f"selected on a beyond-training-length metric: {c.ood_selection}" for c in comps if c.ood_selection]
    lines += [line for comp in comps for line in precondition_line(comp)]
    lines += [line for comp in comps for line in aggregate_line(comp, many)]
    lines += exclusion_lines(comps)
    lines += [line for comp in comps for line in seed_lines(comp)] if per_seed else []
    return list(dict.fromkeys(lines)) + [EXPLAIN]  # a line the metrics share, once


def cells_line(comps: list[Comparison], best: str, compact: bool) -> str:
    """The cells' form and every mark the table can hold: best, a clipped interval end, a failed precondition."""
    aggregate = comps[0].aggregate
    marks = [f"{best}{':' * best.isalpha()} best in column"]  # "* best", "bold: best"
    ranges = {}
    for comp in comps:
        if any(any(cell.interval.clipped) for cell in comp.cells.values()):
            low, high = next(iter(comp.cells.values())).bounds
            ranges.setdefault(f"[{low:g}, {high:g}]", []).append(comp.metric)
    if len(ranges) == 1:
        marks.append(f"{CLIPPED} clipped to the metric's range {next(iter(ranges))}")
    elif ranges:
        shown = "; ".join(f"{span} for {', '.join(metrics)}" for span, metrics in ranges.items())
        marks.append(f"{CLIPPED} clipped to the metric's range ({shown})")
    if any(comp.failed for comp in comps):
        marks.append(f"{MARK} fails the precondition")
    if comps[0].best_over:
        marks.append(f"@value: the {comps[0].best_over} kept in that cell")
    if compact:
        form = f"cells: {aggregate} [interval] (compact cells for this terminal's width; wider: ± std (n) #rank)"
    else:
        form = f"cells: {aggregate} ± std (n) [interval] #rank in column"
    return f"{form}; {', '.join(marks)}"


def seeds_interval(aggregate: str) -> str:
    if aggregate == "median":
        return f"{LEVEL:.0%} order-statistic interval of the median over seeds"
    return f"{LEVEL:.0%} Student-t interval of the mean over seeds"


def interval_line(comps: list[Comparison]) -> str:
    """The interval named once (short; `--explain` has its full method), with what the reader must know to read
    one: a level printed after it where the real one is off, and that few seeds make it wide."""
    names = []
    for comp in comps:
        seeds = seeds_interval(comp.aggregate)
        sampled = sum(cell.sampling is not None for cell in comp.cells.values())
        both = f"{LEVEL:.0%} t interval over seeds and evaluation examples"
        if not sampled:
            names.append(seeds)
        elif sampled == len(comp.cells):
            names.append(both)
        else:
            names.append(f"{both} ({sampled} of {len(comp.cells)} cells; the others: {seeds})")
    line = f"interval: {'; '.join(dict.fromkeys(names))}"
    cells = [cell for comp in comps for cell in comp.cells.values()]
    if any(cell.interval.level != LEVEL for cell in cells if cell.n > 1 or cell.sampling):
        off = f"{TOLERANCE:.0%} points".replace("% points", " points")
        line += f"; its real level after it where more than {off} off"
    few = sum(cell.n < FEW_SEEDS for cell in cells)
    if few:
        where = "every cell" if few == len(cells) else f"{few} of {len(cells)} cells"
        line += f"; n < {FEW_SEEDS} in {where}: wide by design"
    return line


def tests_line(comps: list[Comparison], paper: bool = False) -> str | None:
    """The test, its family and size, alpha and the margin, once for every metric shown; None without a pair.
    `paper` (a LaTeX caption): no command-line hint."""
    protocol = comps[0].protocol
    if protocol is None or not any(comp.pairs.get(col) for comp in comps for col in comp.cols):
        return None
    size = protocol.family

    def tests_(n: int) -> str:
        return f"{n} test{'s' * (n != 1)}"

    if protocol.primary:
        family = f"Holm over the {tests_(size)} of the primary metric {protocol.primary}"
        if protocol.exploratory:
            family += f" (the other metrics' {tests_(protocol.exploratory)}: exploratory, Holm over those)"
    else:
        family = f"Holm over the {tests_(size)} (every pair x column{' x metric' * (len(comps) > 1)})"
    alpha = f"alpha {protocol.alpha:g}"
    if protocol.margins:
        values = set(protocol.margins.values())
        shown = (f"±{values.pop():g}" if len(values) == 1
                 else ", ".join(f"{m} ±{v:g}" for m, v in protocol.margins.items()))  # fmt: skip
        margin = f"equivalent: within {shown} by TOST"
    else:
        margin = (
            f"no equivalence margin{' declared' if paper else ' (--margin M)'}: inconclusive is not 'no difference'"
        )
    where = "per column, best vs runner-up" if paper else "below: best vs runner-up"
    return f"tests: {pair_test_names(comps)}, {family}, {alpha}; {margin}; {where}"


def pair_test_names(comps: list[Comparison]) -> str:
    """The tests behind the pairs' verdicts, named once each: over seeds and examples, or Welch over seeds."""
    names = (p.get("test", "").split(" (")[0] for c in comps for col in c.cols for p in c.pairs.get(col, []))
    return " or ".join(dict.fromkeys(n for n in names if n)) or "Welch t-test over seeds"


def verdict_line(comp: Comparison, col: str, many: bool) -> str | None:
    """`copy val/acc: rope better than alibi (Holm p=0.0004); pairs: 3 better`: the column's best row against the
    runner-up, and every pair's verdict counted; None for a column of one row."""
    pairs = comp.pairs.get(col) or []
    if not pairs:
        return None
    name = f"{'(exploratory) ' if comp.exploratory else ''}{col}{' ' + comp.metric if many else ''}"
    if all(p.get("precondition_failed") for p in pairs):
        return f"{name}: fewer than two rows pass the precondition"
    top = pairs[0]  # ranked rows first: the best and the runner-up
    if math.isnan(top["p"]):
        cells = comp.cells[top["a"], col], comp.cells[top["b"], col]
        why = "n<2" if min(c.n for c in cells) < 2 and not all(c.sampling for c in cells) else "identical values"
        return f"{name}: {top['a']} vs {top['b']}: not testable ({why})"
    deciding = "p_equivalence_holm" if top["verdict"] == "equivalent" else "p_holm"
    p = f"{'TOST ' if deciding != 'p_holm' else ''}Holm p={top[deciding]:.2g}"
    counts = Counter(pair["verdict"] for pair in pairs)
    tally = ", ".join(f"{counts[w]} {w}" for w in WORDS if counts[w])
    return f"{name}: {verdict_text(top)} ({p}); pairs: {tally}"


def precondition_line(comp: Comparison) -> list[str]:
    """The failed cells in one line (the same for every metric: the precondition is judged once per cell)."""
    if not comp.failed:
        return []
    failed = "; ".join(f"{row} / {col}: {why}" for (row, col), why in sorted(comp.failed.items()))
    return [f"{MARK}: fails the precondition {', '.join(comp.preconditions)} (unranked, untested): {failed}"]


def aggregate_line(comp: Comparison, many: bool) -> list[str]:
    """Why the mean rank / MRR are missing or partial, and the IQM where it is defined (3 columns or more)."""
    tag = f" [{comp.metric}]" if many else ""
    if comp.no_aggregate:
        return [f"no mean rank, MRR or IQM{tag}: {comp.no_aggregate}"]
    lines = []
    left = [f"{row} (no {', '.join(cols)})" for row, cols in sorted(comp.missing.items())]
    left += [f"{row} (precondition failed in {', '.join(cols)})" for row, cols in sorted(comp.failed_rows.items())]
    if left and comp.mean_rank:
        lines.append(f"mean rank, MRR{' and IQM' * bool(comp.iqm)} left out: {'; '.join(left)}")
    if comp.iqm:
        levels = sorted(set(comp.iqm_level.values()))
        covers = f"{levels[0]:.0%}" if len(levels) == 1 else f"{levels[0]:.0%}-{levels[-1]:.0%}"
        shown = ", ".join(f"{row} {fmt(v)} [{fmt(lo)}, {fmt(hi)}]" for row, (v, lo, hi) in comp.iqm.items())
        lines.append(f"IQM{tag} (rliable's bootstrap, covers about {covers} here): {shown}")
    return lines


def exclusion_lines(comps: list[Comparison]) -> list[str]:
    """The runs left out, by cell and reason, once for all the metrics that left out the same."""
    groups: dict[tuple, list[str]] = {}
    for comp in comps:
        by_reason = Counter((e.row, e.col, e.reason) for e in comp.excluded)
        if by_reason:
            groups.setdefault(tuple(sorted(by_reason.items())), []).append(comp.metric)
    lines = []
    for reasons, metrics in groups.items():
        total = sum(n for _, n in reasons)
        shown = "; ".join(f"{row} / {col}: {n} x {reason}" for (row, col, reason), n in reasons)
        lines.append(f"excluded {total} run(s) [{', '.join(metrics)}]: {shown}")
    return lines
