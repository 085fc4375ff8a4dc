"""`cli.py compare --report DIR`: plots of one or several Comparisons (one per metric) and one self-contained
HTML page, drawn to go into a paper without edits.

Plots (one panel per column, e.g. per task, titled and labelled in the run-name form (`rope-lr=0.001`); only
the runs kept in the table; one colour per row, the same in every plot):
  bars-<metric>     per metric: the aggregate per row with the table's interval as error bars (the same
                    numbers); bars from 0 for a metric to maximise with a floor (accuracy, F1, BLEU), points
                    for the others (losses, perplexities: a bar from 0 means nothing there); best row outlined
  curves-<metric>   per metric: the metric vs training step (history), mean and min-max band over seeds
  profile-<metric>  per metric: performance profile over columns x seeds (rliable, Agarwal et al. 2021): the
                    fraction of runs scoring past each threshold, with its stratified-bootstrap band
  length            exact-match accuracy vs the task length n (final <stage>/acc_len_<n>), mean and min-max
                    band over seeds, the longest training length (data train_max_len) as a vertical line
  ppl_ctx           perplexity (log scale, ticks as plain numbers) vs evaluation context in tokens (final
                    <stage>/ppl_ctx_<n>), mean and band over seeds, the training context (block_size) as a line
A plot without data is skipped and the page says so. Each is written as PNG (300 dpi), SVG and PDF to DIR;
the PNG is embedded in DIR/index.html as base64, so the page can be mailed on its own.
"""

import base64
import html
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from lightning_modules.metrics import bounds
from pe_sweeps.compare.across_tasks import PROFILE_RESAMPLES, performance_profile
from pe_sweeps.compare.comparison import IDENTITY, Comparison, cell_text, legend, lookup, notes
from pe_sweeps.compare.selection import config_path
from pe_sweeps.layout import make_dir
from pe_sweeps.runs.run_naming import in_name, short_key, short_value

TRAIN_MAX_LEN = "data.init_args.train_max_len"  # synthetic tasks: the longest training sequence
BLOCK_SIZE = "data.init_args.block_size"  # language models: the training context
COLORS = [f"C{i}" for i in range(10)]  # matplotlib's default cycle (tab10)
DPI = 300  # print resolution of the PNGs; SVG and PDF are vector
SUFFIXES = (".png", ".svg", ".pdf")
PLOT_STEMS = ("bars", "curves", "profile", "length", "ppl_ctx")


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


def panels(comp: Comparison) -> tuple[Figure, list]:
    """A figure with one axis per column, at most three per line."""
    n = max(len(comp.cols), 1)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.8 * ncols, 3.4 * nrows), layout="constrained")
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


def interval_errors(cells) -> np.ndarray:
    """matplotlib's asymmetric yerr (2 x N) from each cell's interval as the table prints it (clipped to the
    metric's range); 0 for a single seed, which has none."""
    below = [0.0 if c.n < 2 else c.center - c.ci[0] for c in cells]
    above = [0.0 if c.n < 2 else c.ci[1] - c.center for c in cells]
    return np.array([below, above])


def bar_chart(comp: Comparison) -> Figure | None:
    """The aggregate per row with the table's interval; the best row outlined."""
    if not comp.cells:
        return None
    fig, axes = panels(comp)
    colors = row_colors(comp)
    for ax, col in zip(axes, comp.cols):
        rows = [r for r in comp.rows if (r, col) in comp.cells]
        cells = [comp.cells[r, col] for r in rows]
        xs, centers, errors = range(len(rows)), [c.center for c in cells], interval_errors(cells)
        edges = ["black" if comp.is_best(r, col) else "none" for r in rows]
        if as_bars(comp):
            ax.bar(xs, centers, yerr=errors, capsize=4, color=[colors[r] for r in rows], edgecolor=edges, linewidth=2)
        else:  # one errorbar per row: matplotlib's caps take a single colour per call
            for x, row, cell, edge, error in zip(xs, rows, cells, edges, errors.T):
                ax.errorbar(x, cell.center, yerr=error[:, None] if cell.n > 1 else None, fmt="o", capsize=4,
                            color=colors[row], markeredgecolor=edge if edge != "none" else colors[row], markersize=7,
                            markeredgewidth=1.5)  # fmt: skip
            ax.margins(x=0.15)
        ax.set_xticks(xs, [row_label(comp, r) for r in rows], rotation=30, ha="right", fontsize=8)
        ax.set(title=col_label(comp, col), ylabel=f"{comp.value} {comp.metric}")
    return fig


def over_seeds(records: list[dict], points) -> dict:
    """{x: [y of every record that has a point at x]}, `points(record)` giving a record's (x, y) pairs."""
    series = defaultdict(list)
    for record in records:
        for x, y in points(record):
            series[x].append(y)
    return series


def mean_and_band(ax, series: dict, color: str, label: str, **plot) -> None:
    """Mean over seeds as a line, min-max over seeds as a band (visible as soon as two seeds differ)."""
    xs = sorted(series)
    ax.plot(xs, [np.mean(series[x]) for x in xs], color=color, label=label, **plot)
    ax.fill_between(xs, [min(series[x]) for x in xs], [max(series[x]) for x in xs], color=color, alpha=0.2)


def plain_log_ticks(axis) -> None:
    """Log-scale ticks as plain numbers (20, 30, 50), never 1.525x10^1; minor ticks labelled when the axis
    spans less than two decades, as matplotlib's default does."""
    axis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def per_length(comp: Comparison, prefix: str, ylabel: str, xlabel: str, boundary: str, marked, log=False):
    """Final `<prefix><n>` vs n: mean and min-max band over seeds, one line per row, one panel per column;
    the training length or context (config key `boundary`, labelled `marked(value)`) as a dashed line."""
    if not any(by_suffix(r.final, prefix) for c in comp.cells.values() for r in c.records):
        return None
    fig, axes = panels(comp)
    colors = row_colors(comp)
    for ax, col in zip(axes, comp.cols):
        for row in [r for r in comp.rows if (r, col) in comp.cells]:
            series = over_seeds(comp.cells[row, col].records, lambda r: by_suffix(r.final, prefix).items())
            mean_and_band(ax, series, colors[row], row_label(comp, row), marker=".")
        records = [r for (_, c), cell in comp.cells.items() if c == col for r in cell.records]
        for trained in sorted({lookup(r, boundary) for r in records} - {None}):
            ax.axvline(trained, color="grey", linestyle="--", label=marked(trained))
        if log:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
        ax.set(title=col_label(comp, col), xlabel=xlabel, ylabel=ylabel)
        ax.legend(fontsize=7)
    return fig


def length_curves(comp: Comparison) -> Figure | None:
    """Exact-match accuracy vs the synthetic task's length n (the number of items, not of tokens)."""
    stage = stage_of(comp)
    return per_length(comp, f"{stage}/acc_len_", f"{stage} exact-match accuracy", "task length n", TRAIN_MAX_LEN,
                      lambda n: f"trained on n ≤ {n}")  # fmt: skip


def ppl_context(comp: Comparison) -> Figure | None:
    stage = stage_of(comp)
    return per_length(comp, f"{stage}/ppl_ctx_", f"{stage} perplexity (log scale)", "context (tokens)", BLOCK_SIZE,
                      lambda n: f"training context {n} tokens", log=True)  # fmt: skip


def learning_curves(comp: Comparison) -> Figure | None:
    """The metric vs step: mean over seeds, min-max band."""
    metric = comp.metric
    if not any(metric in h for c in comp.cells.values() for r in c.records for h in r.history):
        return None
    fig, axes = panels(comp)
    colors = row_colors(comp)
    for ax, col in zip(axes, comp.cols):
        for row in [r for r in comp.rows if (r, col) in comp.cells]:
            points = lambda r: [(h["step"], h[metric]) for h in r.history if metric in h and h.get("step") is not None]
            mean_and_band(ax, over_seeds(comp.cells[row, col].records, points), colors[row], row_label(comp, row))
        ax.set(title=col_label(comp, col), xlabel="training step", ylabel=metric)
        ax.legend(fontsize=7)
    return fig


def profile_plot(comp: Comparison) -> Figure | None:
    """rliable's performance profile (score distribution) of each row with an across-column aggregate: the
    fraction of its runs (columns x seeds) scoring above (below, for a metric to minimise) each threshold,
    and a 95 % stratified-bootstrap band."""
    if not comp.iqm:
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
        ax.plot(taus, point, color=colors[row], label=row_label(comp, row))
        ax.fill_between(taus, low, high, color=colors[row], alpha=0.2)
    past = ">" if comp.goal == "max" else "<"
    ax.set(xlabel=f"threshold τ on {comp.value} {comp.metric}", ylabel=f"fraction of runs with score {past} τ",
           title=f"over {len(comp.cols)} column(s) x seeds")  # fmt: skip
    ax.legend(fontsize=7)
    return fig


def seeds_per_cell(comp: Comparison) -> str:
    ns = sorted({cell.n for cell in comp.cells.values()}) or [0]
    return f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]} to {ns[-1]}"


def metric_plots(comp: Comparison) -> list[tuple[str, str, object, str]]:
    """(file name, title, plot function, why skipped) of the plots drawn for each metric."""
    name = slug(comp.metric)
    bars = "bars" if as_bars(comp) else "points"
    return [
        (f"bars-{name}.png", f"{comp.value} {comp.metric} per row: {comp.aggregate} over seeds ({seeds_per_cell(comp)} "
         f"per cell; {bars}), error bars the table's {comp.interval}", bar_chart, "no cell has a usable run"),
        (f"curves-{name}.png", f"{comp.metric} vs training step: mean over seeds, band min-max", learning_curves,
         f"no run has a history of {comp.metric}"),
        (f"profile-{name}.png", f"Performance profile of {comp.value} {comp.metric} over columns x seeds (rliable): "
         f"band 95 % stratified bootstrap, {PROFILE_RESAMPLES:,} resamples", profile_plot,
         "no row has an across-column aggregate"),
    ]  # fmt: skip


SHARED_PLOTS = (
    ("length.png", "Accuracy vs task length n: mean, band min-max over seeds (dashed: longest training length)",
     length_curves, "no run logged per-length accuracy (<stage>/acc_len_<n>)"),
    ("ppl_ctx.png", "Perplexity vs evaluation context in tokens: mean, band min-max over seeds (dashed: training "
     "context)", ppl_context, "no run logged perplexity per context length (<stage>/ppl_ctx_<n>)"),
)  # fmt: skip


def figures_of(comps: list[Comparison]) -> list[tuple[str, str, Figure | None, str]]:
    """(file name, title, figure or None, why skipped): each metric's plots, then the per-length ones (drawn
    once, from the first metric's rows)."""
    plots = [(comp, plot) for comp in comps for plot in metric_plots(comp)]
    plots += [(comps[0], plot) for plot in SHARED_PLOTS]
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


def figure_html(out: Path, filename: str, title: str, fig: Figure) -> str:
    """Save the figure as PNG (300 dpi), SVG and PDF; the PNG embedded, all three linked."""
    path = out / filename
    for suffix in SUFFIXES:
        fig.savefig(path.with_suffix(suffix), dpi=DPI)
    data = base64.b64encode(path.read_bytes()).decode()
    links = " · ".join(f'<a href="{path.with_suffix(s).name}">{path.with_suffix(s).name}</a>' for s in SUFFIXES)
    return (
        f'<h3>{html.escape(title)}</h3>\n<figure><img alt="{filename}" src="data:image/png;base64,{data}">'
        f"<figcaption>{links}</figcaption></figure>"
    )


STYLE = "body{font-family:sans-serif;margin:2em} td,th{border:1px solid #ccc;padding:4px 8px} table{border-collapse:collapse} img{max-width:100%}"  # noqa: E501


def remove_stale(out: Path) -> None:
    """A plot skipped this time (or of a metric not asked for) must not survive from an earlier report."""
    for path in out.iterdir():
        stem = path.stem.split("-", 1)[0]
        if path.suffix in SUFFIXES and stem in PLOT_STEMS:
            path.unlink()


def write_report(comps: Comparison | list[Comparison], out: Path) -> Path:
    """Write every metric's table and plots, then the per-length plots (PNG, SVG, PDF) and index.html into
    out; returns the page's path."""
    comps = [comps] if isinstance(comps, Comparison) else list(comps)
    make_dir(out, "--report")
    remove_stale(out)
    title = f"compare: {comps[0].value} {', '.join(c.metric for c in comps)}"
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for comp in comps:
        parts += [f"<h2>{html.escape(f'{comp.value} {comp.metric} ({comp.goal})')}</h2>", html_table(comp), "<ul>"]
        parts += [f"<li>{html.escape(line.strip())}</li>" for line in [legend(comp), *notes(comp)]] + ["</ul>"]
    parts.append("<h2>Figures</h2>")
    for filename, plot_title, fig, why in figures_of(comps):
        skipped = f"<h3>{html.escape(plot_title)}</h3>\n<p><i>Skipped: {html.escape(why)}.</i></p>"
        parts.append(figure_html(out, filename, plot_title, fig) if fig else skipped)
    page = out / "index.html"
    head = f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
    page.write_text(f"{head}<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")
    return page
