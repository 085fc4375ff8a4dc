"""`cli.py compare --report DIR`: PNG plots of a Comparison and one self-contained HTML page.

Plots (one panel per column, e.g. per task; only the runs kept in the table; one colour per row, the
same in every plot):
  bars.png      the metric per row, mean with std error bars over seeds (best row outlined)
  length.png    exact-match accuracy vs sequence length in tokens (final <stage>/acc_len_<n>), mean and
                min-max band over seeds, the training length (data train_max_len) as a vertical line
  curves.png    the metric vs training step (history), mean and min-max band over seeds
  ppl_ctx.png   perplexity (log scale) vs evaluation context in tokens (final <stage>/ppl_ctx_<n>), mean and
                band over seeds, the training context (data block_size) as a vertical line
  profile.png   performance profile over columns x seeds (rliable, Agarwal et al. 2021): the fraction of
                runs scoring past each threshold, with its stratified-bootstrap band; rows with every column
A plot without data is skipped and the page says so. Each is written as PNG and SVG to DIR; the PNG is
embedded in DIR/index.html as base64, so the page can be mailed on its own.
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

from pe_sweeps.layout import make_dir
from pe_sweeps.tracking.across_tasks import PROFILE_RESAMPLES, performance_profile
from pe_sweeps.tracking.comparison import Comparison, cell_text, legend, lookup, notes

TRAIN_MAX_LEN = "data.init_args.train_max_len"  # synthetic tasks: the longest training sequence
BLOCK_SIZE = "data.init_args.block_size"  # language models: the training context
COLORS = [f"C{i}" for i in range(10)]  # matplotlib's default cycle (tab10)


def row_colors(comp: Comparison) -> dict[str, str]:
    """One colour per row (e.g. per encoding), fixed by the table's row order: every plot agrees."""
    return {row: COLORS[i % len(COLORS)] for i, row in enumerate(comp.rows)}


def stage_of(comp: Comparison) -> str:
    return comp.metric.split("/")[0] if "/" in comp.metric else "val"


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


def bar_chart(comp: Comparison) -> Figure | None:
    if not comp.cells:
        return None
    fig, axes = panels(comp)
    for ax, col in zip(axes, comp.cols):
        rows = [r for r in comp.rows if (r, col) in comp.cells]
        cells = [comp.cells[r, col] for r in rows]
        errors = [0.0 if c.n < 2 else c.std for c in cells]
        colors = row_colors(comp)
        edges = ["black" if comp.is_best(r, col) else "none" for r in rows]
        ax.bar(range(len(rows)), [c.center for c in cells], yerr=errors, capsize=4,
               color=[colors[r] for r in rows], edgecolor=edges, linewidth=2)  # fmt: skip
        ax.set_xticks(range(len(rows)), [f"{r}\nn={c.n}" for r, c in zip(rows, cells)], rotation=30, fontsize=8)
        ax.set(title=col, ylabel=f"{comp.value} {comp.metric}")
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


def per_length(comp: Comparison, prefix: str, ylabel: str, xlabel: str, boundary: str, log=False) -> Figure | None:
    """Final `<prefix><n>` vs n: mean and min-max band over seeds, one line per row, one panel per column;
    the training length or context (config key `boundary`) as a dashed vertical line."""
    if not any(by_suffix(r.final, prefix) for c in comp.cells.values() for r in c.records):
        return None
    fig, axes = panels(comp)
    colors = row_colors(comp)
    for ax, col in zip(axes, comp.cols):
        for row in [r for r in comp.rows if (r, col) in comp.cells]:
            series = over_seeds(comp.cells[row, col].records, lambda r: by_suffix(r.final, prefix).items())
            mean_and_band(ax, series, colors[row], row, marker=".")
        records = [r for (_, c), cell in comp.cells.items() if c == col for r in cell.records]
        for trained in sorted({lookup(r, boundary) for r in records} - {None}):
            ax.axvline(trained, color="grey", linestyle="--", label=f"{boundary.rsplit('.', 1)[-1]}={trained}")
        if log:
            ax.set_yscale("log")
        ax.set(title=col, xlabel=xlabel, ylabel=ylabel)
        ax.legend(fontsize=7)
    return fig


def length_curves(comp: Comparison) -> Figure | None:
    stage = stage_of(comp)
    return per_length(comp, f"{stage}/acc_len_", f"{stage} exact-match accuracy", "length (tokens)", TRAIN_MAX_LEN)


def ppl_context(comp: Comparison) -> Figure | None:
    stage = stage_of(comp)
    ylabel = f"{stage} perplexity (log scale)"
    return per_length(comp, f"{stage}/ppl_ctx_", ylabel, "context (tokens)", BLOCK_SIZE, log=True)


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
            mean_and_band(ax, over_seeds(comp.cells[row, col].records, points), colors[row], row)
        ax.set(title=col, xlabel="training step", ylabel=metric)
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
        ax.plot(taus, point, color=colors[row], label=row)
        ax.fill_between(taus, low, high, color=colors[row], alpha=0.2)
    past = ">" if comp.goal == "max" else "<"
    ax.set(xlabel=f"threshold τ on {comp.value} {comp.metric}", ylabel=f"fraction of runs with score {past} τ",
           title=f"over {len(comp.cols)} column(s) x seeds")  # fmt: skip
    ax.legend(fontsize=7)
    return fig


PLOTS = (
    ("bars.png", "Metric per row, mean ± std over seeds", bar_chart, "no cell has a usable run"),
    ("length.png", "Accuracy vs sequence length: mean, band min-max over seeds (dashed: training length)",
     length_curves, "no run logged per-length accuracy (<stage>/acc_len_<n>)"),
    ("curves.png", "Validation curves: mean over seeds, band min-max", learning_curves,
     "no run has a history of the metric"),
    ("ppl_ctx.png", "Perplexity vs evaluation context: mean, band min-max over seeds (dashed: training context)",
     ppl_context, "no run logged perplexity per context length (<stage>/ppl_ctx_<n>)"),
    ("profile.png", f"Performance profile over columns x seeds (rliable): band 95 % stratified bootstrap, "
     f"{PROFILE_RESAMPLES:,} resamples", profile_plot, "no row has an across-column aggregate"),
)  # fmt: skip


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
            text = html.escape(cell_text(comp.cells[row, col], comp.ranks[row, col], best))
            cells.append(f"<td><b>{text}</b></td>" if best else f"<td>{text}</td>")
        rank = f"{comp.mean_rank[row]:.2f}" if row in comp.mean_rank else "-"
        iqm = "-" if row not in comp.iqm else "{:.3g} [{:.3g}, {:.3g}]".format(*comp.iqm[row])
        lines.append(f"<tr><td>{html.escape(row)}</td>{''.join(cells)}<td>{rank}</td><td>{iqm}</td></tr>")
    return "\n".join(lines + ["</table>"])


def figure_html(out: Path, filename: str, title: str, fig: Figure) -> str:
    path = out / filename
    fig.savefig(path, dpi=110)
    fig.savefig(path.with_suffix(".svg"))  # vector, for a paper
    svg = path.with_suffix(".svg").name
    data = base64.b64encode(path.read_bytes()).decode()
    return (
        f'<h2>{html.escape(title)}</h2>\n<figure><img alt="{filename}" src="data:image/png;base64,{data}">'
        f'<figcaption><a href="{filename}">{filename}</a> · <a href="{svg}">{svg}</a></figcaption></figure>'
    )


STYLE = "body{font-family:sans-serif;margin:2em} td,th{border:1px solid #ccc;padding:4px 8px} table{border-collapse:collapse} img{max-width:100%}"  # noqa: E501


def write_report(comp: Comparison, out: Path) -> Path:
    """Write the plots (PNG and SVG) and index.html into out; returns the page's path."""
    make_dir(out, "--report")
    for stale in [p for name, *_ in PLOTS for p in (out / name, (out / name).with_suffix(".svg")) if p.exists()]:
        stale.unlink()  # a plot skipped this time must not survive from an earlier report
    title = f"compare: {comp.value} {comp.metric}"
    parts = [f"<h1>{html.escape(title)}</h1>", html_table(comp), "<ul>"]
    parts += [f"<li>{html.escape(line.strip())}</li>" for line in [legend(comp), *notes(comp)]] + ["</ul>"]
    for filename, plot_title, plot, why in PLOTS:
        fig = plot(comp)
        skipped = f"<h2>{html.escape(plot_title)}</h2>\n<p><i>Skipped: {html.escape(why)}.</i></p>"
        parts.append(figure_html(out, filename, plot_title, fig) if fig else skipped)
    page = out / "index.html"
    head = f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
    page.write_text(f"{head}<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")
    return page
