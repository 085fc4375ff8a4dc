"""`cli.py compare --report DIR`: PNG plots of a Comparison and one self-contained HTML page.

Plots (one panel per column, e.g. per task; only the runs kept in the table):
  bars.png      the metric per row, mean with std error bars over seeds
  length.png    exact-match accuracy vs sequence length (final <stage>/acc_len_<n>, mean over seeds),
                the training length (data train_max_len) as a vertical line
  curves.png    the metric vs training step (history), mean and min-max band over seeds
  ppl_ctx.png   perplexity vs evaluation context length (final <stage>/ppl_ctx_<n>)
A plot without data is skipped and the page says so. Images are written to DIR and embedded in
DIR/index.html as base64, so the page can be mailed on its own.
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

from tracking.comparison import Comparison, cell_text, legend, lookup, notes

TRAIN_MAX_LEN = "data.init_args.train_max_len"


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
        colors = ["tab:green" if comp.is_best(r, col) else "tab:blue" for r in rows]
        ax.bar(range(len(rows)), [c.center for c in cells], yerr=errors, capsize=4, color=colors)
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


def per_length(comp: Comparison, prefix: str, ylabel: str, boundary: bool) -> Figure | None:
    """Mean over seeds of final `<prefix><n>` vs n, one line per row, one panel per column."""
    if not any(by_suffix(r["final"], prefix) for c in comp.cells.values() for r in c.records):
        return None
    fig, axes = panels(comp)
    for ax, col in zip(axes, comp.cols):
        for row in [r for r in comp.rows if (r, col) in comp.cells]:
            series = over_seeds(comp.cells[row, col].records, lambda r: by_suffix(r["final"], prefix).items())
            lengths = sorted(series)
            ax.plot(lengths, [np.mean(series[n]) for n in lengths], marker=".", label=row)
        records = [r for (_, c), cell in comp.cells.items() if c == col for r in cell.records]
        for train_len in sorted({lookup(r, TRAIN_MAX_LEN) for r in records} - {None}) if boundary else []:
            ax.axvline(train_len, color="grey", linestyle="--", label=f"train_max_len={train_len}")
        ax.set(title=col, xlabel="length", ylabel=ylabel)
        ax.legend(fontsize=7)
    return fig


def length_curves(comp: Comparison) -> Figure | None:
    stage = stage_of(comp)
    return per_length(comp, f"{stage}/acc_len_", f"{stage} exact-match accuracy", boundary=True)


def ppl_context(comp: Comparison) -> Figure | None:
    stage = stage_of(comp)
    return per_length(comp, f"{stage}/ppl_ctx_", f"{stage} perplexity", boundary=True)


def learning_curves(comp: Comparison) -> Figure | None:
    """The metric vs step: mean over seeds, min-max band."""
    metric = comp.metric
    if not any(metric in h for c in comp.cells.values() for r in c.records for h in r.get("history", [])):
        return None
    fig, axes = panels(comp)
    for ax, col in zip(axes, comp.cols):
        for row in [r for r in comp.rows if (r, col) in comp.cells]:
            points = lambda r: [
                (h["step"], h[metric]) for h in r.get("history", []) if metric in h and h.get("step") is not None
            ]
            series = over_seeds(comp.cells[row, col].records, points)
            steps = sorted(series)
            (line,) = ax.plot(steps, [np.mean(series[s]) for s in steps], label=row)
            lo, hi = [min(series[s]) for s in steps], [max(series[s]) for s in steps]
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2)
        ax.set(title=col, xlabel="step", ylabel=metric)
        ax.legend(fontsize=7)
    return fig


PLOTS = (
    ("bars.png", "Metric per row, mean ± std over seeds", bar_chart, "no cell has a usable run"),
    ("length.png", "Accuracy vs sequence length (dashed: training length)", length_curves,
     "no run logged per-length accuracy (<stage>/acc_len_<n>)"),
    ("curves.png", "Validation curves: mean over seeds, band min-max", learning_curves,
     "no run has a history of the metric"),
    ("ppl_ctx.png", "Perplexity vs evaluation context length", ppl_context,
     "no run logged perplexity per context length (<stage>/ppl_ctx_<n>)"),
)  # fmt: skip


def html_table(comp: Comparison) -> str:
    head = [", ".join(comp.row_keys), *comp.cols, "mean rank"]
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
        lines.append(f"<tr><td>{html.escape(row)}</td>{''.join(cells)}<td>{comp.mean_rank[row]:.2f}</td></tr>")
    return "\n".join(lines + ["</table>"])


def figure_html(out: Path, filename: str, title: str, fig: Figure) -> str:
    path = out / filename
    fig.savefig(path, dpi=110)
    data = base64.b64encode(path.read_bytes()).decode()
    return (
        f'<h2>{html.escape(title)}</h2>\n<figure><img alt="{filename}" src="data:image/png;base64,{data}">'
        f'<figcaption><a href="{filename}">{filename}</a></figcaption></figure>'
    )


STYLE = "body{font-family:sans-serif;margin:2em} td,th{border:1px solid #ccc;padding:4px 8px} table{border-collapse:collapse} img{max-width:100%}"  # noqa: E501


def write_report(comp: Comparison, out: Path) -> Path:
    """Write the plots (PNG) and index.html into out; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in [p for name, *_ in PLOTS if (p := out / name).exists()]:
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
