"""`cli.py compare --report DIR`: plots of one or several Comparisons (one per metric) and one self-contained
HTML page, drawn to go into a paper without edits (issue 29; issue 45 point 5).

Every axis names its metric in words (compare/labels.py: `val/acc_ood` -> `exact-match accuracy beyond training
length`), every figure says on itself what its points, lines and bands are, and every interval is the cells' own
(`Cell.interval`, the table's numbers: a 95 % Student-t interval of the mean over seeds, or the median's). One
panel per column (e.g. per task), titled and labelled in the run-name form (`rope-lr=0.001`); only the runs kept in
the table; one colour per row, the same in every plot:
  atlas-<metric>    per metric, from 8 columns on: rows x columns in one heatmap, rows by IQM, columns by task
                    category, a cell failing its precondition grey (compare/atlas_figure.py); under each metric's
                    table, its rows' mean #rank per task category (compare/categories.py)
  points-<metric>   per metric: each cell's aggregate as a point with its interval as a line and n under the row's
                    name; one seed: a hollow point, no line; the best row outlined
  curves-<metric>   per metric: the metric vs training step (history), aggregate and interval band over seeds
  profile-<metric>  per metric, only over 3 columns or more: performance profile over columns x seeds (rliable,
                    Agarwal et al. 2021), the fraction of runs scoring past each threshold, with its
                    stratified-bootstrap band
  length, tok_length   exact-match and token accuracy vs the task length n (final <stage>/acc_len_<n>,
                    <stage>/tok_acc_len_<n>), aggregate and interval band over seeds, the longest training
                    length (data train_max_len) as a vertical line; token accuracy is the informative one beyond
                    the training length, where exact match is 0
  heatmap, tok_heatmap  rows (encodings) x lengths, the aggregate over seeds written on each cell
  ppl_ctx           perplexity (log scale, ticks as plain numbers) vs evaluation context in tokens (final
                    <stage>/ppl_ctx_<n>), aggregate and band over seeds, the training context (block_size) as a line
A figure is a section of the page only when it is drawn: nothing of its kind logged, it is left out; a per-metric
figure not drawn is named with why in one line. Each is written as PNG (300 dpi), SVG and PDF to DIR; the PNG is
embedded in DIR/index.html as base64, so the page can be mailed on its own.
"""

import base64
import html
import math
import re
import textwrap
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from lightning_modules.metrics import bounds
from pe_sweeps.compare.across_tasks import PROFILE_RESAMPLES, performance_profile
from pe_sweeps.compare.atlas_figure import MIN_ATLAS_COLUMNS, atlas_heatmap
from pe_sweeps.compare.categories import category_grid, category_title
from pe_sweeps.compare.comparison import (
    IDENTITY,
    Cell,
    Comparison,
    cell_text,
    interval_method,
    legend,
    lookup,
    notes,
)
from pe_sweeps.compare.labels import metric_label, value_label
from pe_sweeps.compare.selection import config_path
from pe_sweeps.layout import make_dir
from pe_sweeps.runs.run_naming import in_name, short_key, short_value

TRAIN_MAX_LEN = "data.init_args.train_max_len"  # synthetic tasks: the longest training sequence
BLOCK_SIZE = "data.init_args.block_size"  # language models: the training context
COLORS = [f"C{i}" for i in range(10)]  # matplotlib's default cycle (tab10)
CSS_PX_PER_INCH = 90  # a figure's width on the page
DPI = 300  # print resolution of the PNGs; SVG and PDF are vector
SUFFIXES = (".png", ".svg", ".pdf")
PLOT_STEMS = (
    "atlas",
    "points",
    "bars",
    "curves",
    "profile",
    "length",
    "tok_length",
    "heatmap",
    "tok_heatmap",
    "ppl_ctx",
)  # bars: earlier reports


def row_colors(comp: Comparison) -> dict[str, str]:
    """One colour per row (e.g. per encoding), by the rows' sorted names: every plot, and every metric's
    plots (whose rows are ordered by their own ranks), agree."""
    return {row: COLORS[i % len(COLORS)] for i, row in enumerate(sorted(comp.rows))}


def stage_of(comp: Comparison) -> str:
    return comp.metric.split("/")[0] if "/" in comp.metric else "val"


def slug(metric: str) -> str:
    """A metric as part of a file name: `val/acc_ood` -> `val_acc_ood`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", metric)


def name_part(key: str, value) -> str:
    """One part of a run-name form label: the task and encoding bare, anything else `short_key=value`."""
    bare = key in IDENTITY or in_name(config_path(key)) or in_name(key)
    return short_value(value) if bare else f"{short_key(config_path(key))}={short_value(value)}"


def readable(comp: Comparison, keys: list[str], position: int, text: str) -> str:
    """A row (position 0) or column (1) in the run-name form, `rope-lr=0.001`, from one of its records;
    the table's text when no record has every key."""
    record = next((c.records[0] for k, c in comp.cells.items() if k[position] == text), None)
    values = [lookup(record, k) for k in keys] if record is not None else [None]
    return text if None in values else "-".join(name_part(k, v) for k, v in zip(keys, values))


def row_label(comp: Comparison, row: str) -> str:
    return readable(comp, comp.row_keys, 0, row)


def col_label(comp: Comparison, col: str) -> str:
    return readable(comp, comp.col_keys, 1, col)


def panels(comp: Comparison, width: float = 4.8) -> tuple[Figure, list]:
    """A figure with one axis per column (`width` inches each), at most three per line."""
    n = max(len(comp.cols), 1)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(width * ncols, 3.4 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).flatten()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, list(axes[:n])


def by_suffix(values: dict, prefix: str) -> dict[int, float]:
    """{n: value} for every key `<prefix><n>`, e.g. prefix "val/acc_len_"."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    return {int(m[1]): v for k, v in values.items() if (m := pattern.match(k))}


def as_bars(comp: Comparison) -> bool:
    """Bars from 0 only for a metric to maximise with a floor (accuracy, F1, BLEU: 0 is a real baseline);
    losses and perplexities are points with their interval."""
    return comp.goal == "max" and math.isfinite(bounds(comp.metric)[0])


def kind_of(comp: Comparison, col: str | None = None) -> str | None:
    """The task module's class of a column (of the first, without one): which accuracy `acc` is."""
    return comp.kinds.get(col if col is not None else next(iter(comp.kinds), None))


def axis_label(comp: Comparison, metric: str | None = None, col: str | None = None) -> str:
    """A metric as an axis shows it: its readable name (compare/labels.py), `--value best` said."""
    return value_label(metric or comp.metric, comp.value, kind_of(comp, col))


def interval_name(comp: Comparison) -> str:
    """The cells' interval in a few words for a figure (`95% Student-t interval of the mean over seeds`): the
    table's own method name, up to its details."""
    return comp.interval.split(" (")[0].split("; ")[0]


def seed_interval_name(comp: Comparison) -> str:
    """The interval over seeds alone in a few words: the band of a curve, whose points (a length, a step) have
    no per-example outcomes of their own."""
    return interval_method(comp.aggregate, comp.metric).split(" (")[0].split("; ")[0]


def seed_cell(comp: Comparison, records: list, values: list[float], metric: str) -> Cell:
    """A cell of the per-seed values of one point of a curve (a length, a step), aggregated and given its
    interval as the table's cells are (`Cell.interval`)."""
    return Cell(records=records, values=values, aggregate=comp.aggregate, bounds=bounds(metric))


def band_note(comp: Comparison) -> str:
    """What a curve's line and band are, written on the figure."""
    return f"line: {comp.aggregate} over seeds; band: {seed_interval_name(comp)} (none where n = 1); n = seeds"


def point_chart(comp: Comparison) -> Figure | None:
    """Per column, each row's aggregate as a point with the cell's interval as a line (`Cell.interval`, the
    table's numbers), n under each row's name; a single seed a hollow point without a line; the best row
    outlined in black. Points, not bars: a bar from 0 hides the interval and n = 1 drew a zero-width stub."""
    if not comp.cells:
        return None
    fig, axes = panels(comp, width=max(4.8, 0.7 * len(comp.rows) + 1.5))
    colors = row_colors(comp)
    for ax, col in zip(axes, comp.cols):
        rows = [r for r in comp.rows if (r, col) in comp.cells]
        for x, row in enumerate(rows):
            cell = comp.cells[row, col]
            interval = cell.interval
            if math.isfinite(interval.low) and math.isfinite(interval.high):  # one seed: none, or over examples
                ax.vlines(x, interval.low, interval.high, color=colors[row], linewidth=2)
                ax.hlines([interval.low, interval.high], x - 0.12, x + 0.12, color=colors[row], linewidth=1.5)
                face = colors[row]
            else:
                face = "white"  # no interval to draw: hollow
            edge = "black" if comp.is_best(row, col) else colors[row]
            ax.plot([x], [cell.center], "o", color=colors[row], markerfacecolor=face, markeredgecolor=edge,
                    markersize=8, markeredgewidth=1.8 if edge == "black" else 1.2, zorder=3)  # fmt: skip
        row_ticks(ax, [row_label(comp, r) for r in rows], [comp.cells[r, col].n for r in rows])
        ax.margins(x=0.15)
        within_range(ax, bounds(comp.metric))
        ax.grid(axis="y", alpha=0.3)
        ax.set(title=col_label(comp, col), ylabel=axis_label(comp, col=col))
    note(fig, f"point: {comp.aggregate} over seeds; line: {interval_name(comp)}; hollow: no interval (one seed); "
              "black edge: best in its panel; n = seeds per cell")  # fmt: skip
    return fig


def note(fig: Figure, text: str) -> None:
    """What the figure's marks are, written on it above the panels, wrapped to the figure's width."""
    fig.suptitle(textwrap.fill(text, width=int(fig.get_figwidth() * 17)), fontsize=8)


def within_range(ax, limits: tuple[float, float]) -> None:
    """Keep the y axis inside the metric's range (an accuracy never below 0 or above 1), a small margin kept."""
    low, high = ax.get_ylim()
    floor, ceiling = limits
    pad = 0.03 * (ceiling - floor) if math.isfinite(floor) and math.isfinite(ceiling) else 0.0
    ax.set_ylim(
        max(low, floor - pad) if math.isfinite(floor) else low,
        min(high, ceiling + pad) if math.isfinite(ceiling) else high,
    )


def row_ticks(ax, names: list[str], ns: list[int]) -> None:
    """The rows' names with their n under their points: `rope` over `n=3`, or, when long or many, one slanted
    line `rope (n=3)` each, so that none overlaps."""
    if len(names) * max(map(len, names)) > 40:
        ax.set_xticks(range(len(names)), [f"{name} (n={n})" for name, n in zip(names, ns)], fontsize=8, rotation=30,
                      ha="right", rotation_mode="anchor")  # fmt: skip
    else:
        ax.set_xticks(range(len(names)), [f"{name}\nn={n}" for name, n in zip(names, ns)], fontsize=8)


def over_seeds(records: list[dict], points) -> dict:
    """{x: ([records], [y]) of every record that has a point at x}, `points(record)` giving a record's (x, y)
    pairs."""
    series = defaultdict(lambda: ([], []))
    for record in records:
        for x, y in points(record):
            series[x][0].append(record)
            series[x][1].append(y)
    return series


def aggregate_and_band(ax, comp: Comparison, series: dict, metric: str, color: str, label: str, **plot) -> None:
    """The aggregate over seeds as a line, each point's interval over seeds (the cells' own, `Cell.interval`) as
    a band where it has one (two seeds or more)."""
    xs = sorted(series)
    cells = [seed_cell(comp, *series[x], metric) for x in xs]
    ax.plot(xs, [c.center for c in cells], color=color, label=label, **plot)
    lows, highs = [c.interval.low for c in cells], [c.interval.high for c in cells]
    ax.fill_between(xs, lows, highs, color=color, alpha=0.2, linewidth=0)  # NaN (n = 1): no band there


def plain_log_ticks(axis) -> None:
    """Log-scale ticks as plain numbers (20, 30, 50), never 1.525x10^1; minor ticks labelled when the axis
    spans less than two decades, as matplotlib's default does."""
    axis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def has_per_length(comp: Comparison, prefix: str) -> bool:
    return any(by_suffix(r.final, prefix) for c in comp.cells.values() for r in c.records)


def per_length(comp: Comparison, prefix: str, ylabel: str, xlabel: str, boundary: str, marked, log=False):
    """Final `<prefix><n>` vs n: the aggregate over seeds and the cells' interval as a band, one line per row
    (its n in the legend), one panel per column; the training length or context (config key `boundary`,
    labelled `marked(value)`) as a dashed line; what the band is written on the figure."""
    if not has_per_length(comp, prefix):
        return None
    fig, axes = panels(comp)
    colors = row_colors(comp)
    for ax, col in zip(axes, comp.cols):
        for row in [r for r in comp.rows if (r, col) in comp.cells]:
            series = over_seeds(comp.cells[row, col].records, lambda r: by_suffix(r.final, prefix).items())
            label = f"{row_label(comp, row)} (n={comp.cells[row, col].n})"
            aggregate_and_band(ax, comp, series, prefix + "1", colors[row], label, marker=".")
        records = [r for (_, c), cell in comp.cells.items() if c == col for r in cell.records]
        for trained in sorted({lookup(r, boundary) for r in records} - {None}):
            ax.axvline(trained, color="grey", linestyle="--", label=marked(trained))
        if log:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
        else:
            within_range(ax, bounds(prefix + "1"))
        ax.set(title=col_label(comp, col), xlabel=xlabel, ylabel=ylabel)
        ax.legend(fontsize=7)
    note(fig, band_note(comp))
    return fig


def trained_on(n) -> str:
    return f"trained on n ≤ {n}"


def length_curves(comp: Comparison) -> Figure | None:
    """Exact-match accuracy vs the synthetic task's length n (the number of items, not of tokens)."""
    stage = stage_of(comp)
    return per_length(comp, f"{stage}/acc_len_", metric_label(f"{stage}/acc"), "task length n", TRAIN_MAX_LEN,
                      trained_on)  # fmt: skip


def token_length_curves(comp: Comparison) -> Figure | None:
    """Token accuracy vs length: where exact match is 0 beyond the training length, the one that still
    separates the encodings."""
    stage = stage_of(comp)
    return per_length(comp, f"{stage}/tok_acc_len_", metric_label(f"{stage}/tok_acc"), "task length n",
                      TRAIN_MAX_LEN, trained_on)  # fmt: skip


def ppl_context(comp: Comparison) -> Figure | None:
    stage = stage_of(comp)
    return per_length(comp, f"{stage}/ppl_ctx_", f"{metric_label(f'{stage}/ppl')} (log scale)", "context (tokens)",
                      BLOCK_SIZE, lambda n: f"training context {n} tokens", log=True)  # fmt: skip


def heatmap(comp: Comparison, prefix: str) -> Figure | None:
    """Rows x lengths (e.g. encodings x task length n) per column: each cell the aggregate over seeds of
    `<prefix><n>`, its number written on it, on one colour scale from the metric's range; the longest
    training length as a dashed line between the lengths."""
    if not has_per_length(comp, prefix):
        return None
    fig, axes = panels(comp)
    low, high = bounds(prefix + "1")
    image = None
    for ax, col in zip(axes, comp.cols):
        rows = [r for r in comp.rows if (r, col) in comp.cells]
        series = {r: over_seeds(comp.cells[r, col].records, lambda r: by_suffix(r.final, prefix).items()) for r in rows}
        lengths = sorted({n for s in series.values() for n in s})
        data = np.full((len(rows), len(lengths)), np.nan)
        for i, row in enumerate(rows):
            for j, n in enumerate(lengths):
                if n in series[row]:
                    data[i, j] = seed_cell(comp, *series[row][n], prefix + "1").center
        scale = {"vmin": low, "vmax": high} if math.isfinite(low) and math.isfinite(high) else {}
        image = ax.imshow(data, cmap="viridis", aspect="auto", **scale)
        for (i, j), value in np.ndenumerate(data):
            if math.isfinite(value):
                shade = image.norm(value)
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="black" if shade > 0.6 else "white")  # fmt: skip
        trained_lengths = {lookup(record, TRAIN_MAX_LEN) for row in rows for record in comp.cells[row, col].records}
        for trained in sorted(trained_lengths - {None}):
            past = sum(n <= trained for n in lengths)
            if 0 < past < len(lengths):
                ax.axvline(past - 0.5, color="white", linestyle="--", linewidth=1.2, label=trained_on(trained))
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7)
        ax.set_yticks(range(len(rows)), [row_label(comp, r) for r in rows], fontsize=8)
        ax.set(title=col_label(comp, col), xlabel="task length n")
    if image is not None:
        fig.colorbar(image, ax=axes, label=f"{metric_label(prefix.removesuffix('_len_'))}")
    note(fig, f"{comp.aggregate} over seeds per encoding and length (dashed: the longest training length)")
    return fig


def length_heatmap(comp: Comparison) -> Figure | None:
    return heatmap(comp, f"{stage_of(comp)}/acc_len_")


def token_length_heatmap(comp: Comparison) -> Figure | None:
    return heatmap(comp, f"{stage_of(comp)}/tok_acc_len_")


def learning_curves(comp: Comparison) -> Figure | None:
    """The metric vs step: the aggregate over seeds, the cells' interval as a band."""
    metric = comp.metric
    if not any(metric in h for c in comp.cells.values() for r in c.records for h in r.history):
        return None
    fig, axes = panels(comp)
    colors = row_colors(comp)
    for ax, col in zip(axes, comp.cols):
        for row in [r for r in comp.rows if (r, col) in comp.cells]:
            points = lambda r: [(h["step"], h[metric]) for h in r.history if metric in h and h.get("step") is not None]
            label = f"{row_label(comp, row)} (n={comp.cells[row, col].n})"
            aggregate_and_band(ax, comp, over_seeds(comp.cells[row, col].records, points), metric, colors[row], label)
        within_range(ax, bounds(metric))
        ax.set(title=col_label(comp, col), xlabel="training step", ylabel=metric_label(metric, kind_of(comp, col)))
        ax.legend(fontsize=7)
    note(fig, band_note(comp))
    return fig


MIN_PROFILE_COLUMNS = 3  # a profile over one or two columns is a step function of a handful of runs


def profile_plot(comp: Comparison) -> Figure | None:
    """rliable's performance profile (score distribution) of each row with an across-column aggregate: the
    fraction of its runs (columns x seeds) scoring above (below, for a metric to minimise) each threshold,
    and a 95 % stratified-bootstrap band. Only over 3 columns or more."""
    if not comp.iqm or len(comp.cols) < MIN_PROFILE_COLUMNS:
        return None
    values = [v for row in comp.iqm for col in comp.cols for v in comp.cells[row, col].values]
    taus = np.linspace(min(values), max(values), 101)
    fig = Figure(figsize=(5.6, 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colors = row_colors(comp)
    for row in comp.iqm:
        scores = [comp.cells[row, col].values for col in comp.cols]
        point, low, high = performance_profile(scores, taus, comp.goal)
        runs = sum(len(s) for s in scores)
        ax.plot(taus, point, color=colors[row], label=f"{row_label(comp, row)} ({runs} runs)")
        ax.fill_between(taus, low, high, color=colors[row], alpha=0.2, linewidth=0)
    past = ">" if comp.goal == "max" else "<"
    ax.set(xlabel=f"threshold τ on {axis_label(comp)}", ylabel=f"fraction of runs with score {past} τ",
           title=f"over {len(comp.cols)} columns x seeds; band: 95 % stratified bootstrap")  # fmt: skip
    ax.legend(fontsize=7)
    return fig


def seeds_per_cell(comp: Comparison) -> str:
    ns = sorted({cell.n for cell in comp.cells.values()}) or [0]
    return f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]} to {ns[-1]}"


def profile_why(comp: Comparison) -> str:
    if len(comp.cols) < MIN_PROFILE_COLUMNS:
        return (
            f"{comp.metric}: a performance profile needs {MIN_PROFILE_COLUMNS} columns or more ({len(comp.cols)} here)"
        )
    return f"{comp.metric}: no performance profile, no row has an across-column aggregate"


def atlas_plot(comp: Comparison) -> Figure | None:
    """The atlas heatmap (compare/atlas_figure.py): rows x many columns, rows by IQM, columns by task category."""
    return atlas_heatmap(comp, row_label, col_label, axis_label(comp))


def metric_plots(comp: Comparison) -> list[tuple[str, str, object, str | None]]:
    """(file name, title, plot function, why not drawn) of the plots drawn for each metric (the atlas heatmap,
    from MIN_ATLAS_COLUMNS columns, is not named when not drawn: the points show every cell below that)."""
    name, label = slug(comp.metric), axis_label(comp)
    return [
        (f"atlas-{name}.png", f"{label} ({comp.metric}): every row x column, rows ranked by IQM over columns x seeds, "
         f"columns grouped by task category, grey: precondition failed (from {MIN_ATLAS_COLUMNS} columns)",
         atlas_plot, None),
        (f"points-{name}.png", f"{label} ({comp.metric}) per row: {comp.aggregate} over seeds ({seeds_per_cell(comp)} "
         f"per cell) with the table's {comp.interval}", point_chart, f"{comp.metric}: no cell has a usable run"),
        (f"curves-{name}.png", f"{label} vs training step: {comp.aggregate} over seeds, band the "
         f"{seed_interval_name(comp)}", learning_curves, f"{comp.metric} vs step: no run has its history"),
        (f"profile-{name}.png", f"Performance profile of {label} over columns x seeds (rliable): band 95 % "
         f"stratified bootstrap, {PROFILE_RESAMPLES:,} resamples", profile_plot,
         profile_why(comp)),
    ]  # fmt: skip


def shared_plots(comp: Comparison) -> list[tuple[str, str, object, str | None]]:
    """The per-length plots, drawn once from the first metric's rows (why not drawn: None when nothing of their
    kind was logged, as the perplexity of a synthetic task: not worth a line)."""
    band = f"{comp.aggregate} over seeds, band the {seed_interval_name(comp)}"
    return [
        ("length.png", f"Exact-match accuracy vs task length n: {band} (dashed: longest training length)",
         length_curves, None),
        ("tok_length.png", f"Token accuracy vs task length n: {band} (dashed: longest training length)",
         token_length_curves, None),
        ("heatmap.png", f"Exact-match accuracy per encoding and task length n ({comp.aggregate} over seeds)",
         length_heatmap, None),
        ("tok_heatmap.png", f"Token accuracy per encoding and task length n ({comp.aggregate} over seeds)",
         token_length_heatmap, None),
        ("ppl_ctx.png", f"Perplexity vs evaluation context in tokens: {band} (dashed: training context)",
         ppl_context, None),
    ]  # fmt: skip


def figures_of(comps: list[Comparison]) -> list[tuple[str, str, Figure | None, str | None]]:
    """(file name, title, figure or None, why not drawn): each metric's plots, then the per-length ones (drawn
    once, from the first metric's rows)."""
    plots = [(comp, plot) for comp in comps for plot in metric_plots(comp)]
    plots += [(comps[0], plot) for plot in shared_plots(comps[0])]
    return [(name, title, draw(comp), why) for comp, (name, title, draw, why) in plots]


def html_table(comp: Comparison) -> str:
    head = [", ".join(comp.row_keys), *comp.cols, "mean rank", "IQM [95 % stratified bootstrap]"]
    lines = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for row in comp.rows:
        cells = []
        for col in comp.cols:
            if (row, col) not in comp.cells:
                cells.append("<td>-</td>")
                continue
            best = comp.is_best(row, col)
            text = html.escape(cell_text(comp.cells[row, col], comp.ranks.get((row, col)), best))
            cells.append(f"<td><b>{text}</b></td>" if best else f"<td>{text}</td>")
        rank = f"{comp.mean_rank[row]:.2f}" if row in comp.mean_rank else "-"
        iqm = "-" if row not in comp.iqm else "{:.3g} [{:.3g}, {:.3g}]".format(*comp.iqm[row])
        lines.append(f"<tr><td>{html.escape(row)}</td>{''.join(cells)}<td>{rank}</td><td>{iqm}</td></tr>")
    return "\n".join(lines + ["</table>"])


def category_html(comp: Comparison) -> list[str]:
    """The per-category mean-rank table (compare/categories.py) under the main table, when there is one."""
    grid = category_grid(comp)
    if grid is None:
        return []
    header, rows = grid
    lines = [f"<p>{html.escape(category_title(comp))}</p>", "<table>"]
    lines.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
    lines += ["<tr>" + "".join(f"<td>{html.escape(text)}</td>" for text in row) + "</tr>" for row in rows]
    return lines + ["</table>"]


def figure_html(out: Path, filename: str, title: str, fig: Figure) -> str:
    """Save the figure as PNG (300 dpi), SVG and PDF; one section: its title, the PNG embedded, all three linked."""
    path = out / filename
    for suffix in SUFFIXES:
        fig.savefig(path.with_suffix(suffix), dpi=DPI)
    data = base64.b64encode(path.read_bytes()).decode()
    width = round(fig.get_figwidth() * CSS_PX_PER_INCH)  # one type size on the page, whatever the figure's width
    links = " · ".join(f'<a href="{path.with_suffix(s).name}">{path.with_suffix(s).name}</a>' for s in SUFFIXES)
    return (
        f'<section class="figure"><h3>{html.escape(title)}</h3>\n<figure><img alt="{filename}" '
        f'src="data:image/png;base64,{data}" style="width:{width}px">'
        f"<figcaption>{links}</figcaption></figure></section>"
    )


STYLE = "body{font-family:sans-serif;margin:2em} td,th{border:1px solid #ccc;padding:4px 8px} table{border-collapse:collapse} img{max-width:100%} .not-drawn{color:#555}"  # noqa: E501


def remove_stale(out: Path) -> None:
    """A plot not drawn this time (or of a metric not asked for) must not survive from an earlier report."""
    for path in out.iterdir():
        stem = path.stem.split("-", 1)[0]
        if path.suffix in SUFFIXES and stem in PLOT_STEMS:
            path.unlink()


def write_report(comps: Comparison | list[Comparison], out: Path) -> Path:
    """Write every metric's table and plots, then the per-length plots (PNG, SVG, PDF) and index.html into
    out; returns the page's path. A figure is a section only when drawn; the figures not drawn that a reader
    may look for are named in one line, with why."""
    comps = [comps] if isinstance(comps, Comparison) else list(comps)
    make_dir(out, "--report")
    remove_stale(out)
    title = f"compare: {comps[0].value} {', '.join(c.metric for c in comps)}"
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for comp in comps:
        heading = f"{axis_label(comp)}: {comp.value} {comp.metric} ({comp.goal})"
        parts += [f"<h2>{html.escape(heading)}</h2>", html_table(comp), *category_html(comp), "<ul>"]
        parts += [f"<li>{html.escape(line.strip())}</li>" for line in [legend(comp), *notes(comp)]] + ["</ul>"]
    figures = figures_of(comps)
    drawn = [figure_html(out, filename, plot_title, fig) for filename, plot_title, fig, _ in figures if fig]
    not_drawn = [why for *_, fig, why in figures if fig is None and why]
    if drawn or not_drawn:
        parts.append("<h2>Figures</h2>")
    parts += drawn
    if not_drawn:
        parts.append(f'<p class="not-drawn">Not drawn: {html.escape("; ".join(not_drawn))}.</p>')
    page = out / "index.html"
    head = f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
    page.write_text(f"{head}<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")
    return page
