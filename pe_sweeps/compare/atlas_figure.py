"""The atlas heatmap of `compare --report` (issue 49.3): rows (encodings) x many columns (tasks) in one figure,
readable at 40 x 40. Rows by their IQM over the columns x seeds (best first; the rows without one, a cell failing its
precondition or missing, follow under a line, by the IQM of the cells they have); columns grouped by task category
(compare/categories.py), the category named above its group; each cell coloured by its aggregate over seeds, its
number written on it; a cell failing its precondition grey with no number, a missing one hatched."""

import math

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.transforms import blended_transform_factory

from lightning_modules.metric_names import bounds
from pe_sweeps.compare.across_tasks import iqm
from pe_sweeps.compare.categories import grouped_columns
from pe_sweeps.compare.comparison import Comparison

MIN_ATLAS_COLUMNS = 8  # below this the per-column panels (points-<metric>) show every cell already
FAILED_GREY = "#c8c8c8"
CELL_WIDTH, CELL_HEIGHT = 0.34, 0.24  # inches per column and per row: two-decimal numbers at 4.5 pt fit
MARGIN_WIDTH, MARGIN_HEIGHT = 3.2, 2.6  # row names and the colour bar; task names and category labels


def row_order(comp: Comparison) -> tuple[list[str], list[str]]:
    """(rows with an IQM, best first; the others, by the IQM of every cell they have, best first): a row failing a
    precondition or missing a column has no IQM (statistics.aggregate_rows), and a failed cell still counts as the
    low score it is when ordering those."""
    sign = -1.0 if comp.goal == "max" else 1.0
    ranked = sorted(comp.iqm, key=lambda row: (sign * comp.iqm[row][0], row))
    scores = {row: [comp.cells[row, col].values for col in comp.cols if (row, col) in comp.cells] for row in comp.rows}
    others = [row for row in comp.rows if row not in comp.iqm and scores[row]]
    others.sort(key=lambda row: (sign * iqm(scores[row]), row))
    return ranked, others


def atlas_matrix(comp: Comparison, rows: list[str], cols: list[str]) -> np.ma.MaskedArray:
    """Rows x columns of each cell's aggregate over seeds, masked where the cell fails its precondition or is
    missing (NaN there)."""
    data = np.full((len(rows), len(cols)), np.nan)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            if (row, col) in comp.cells:
                data[i, j] = comp.cells[row, col].center
    failed = np.array([[(row, col) in comp.failed for col in cols] for row in rows], dtype=bool).reshape(data.shape)
    return np.ma.masked_array(data, mask=failed | np.isnan(data))


def atlas_heatmap(comp: Comparison, row_label, col_label, value_label: str) -> Figure | None:
    """The figure (see the module's docstring), or None below MIN_ATLAS_COLUMNS columns or two rows. `row_label`,
    `col_label`: a row's or column's name on the figure; `value_label`: the colour bar's."""
    if len(comp.cols) < MIN_ATLAS_COLUMNS or len(comp.rows) < 2:
        return None
    ranked, others = row_order(comp)
    rows = ranked + others
    groups = grouped_columns(comp)
    cols = [col for _, group in groups for col in group]
    data = atlas_matrix(comp, rows, cols)
    fig = Figure(figsize=(MARGIN_WIDTH + CELL_WIDTH * len(cols), MARGIN_HEIGHT + CELL_HEIGHT * len(rows)),
                 layout="constrained")  # fmt: skip
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    cmap = colormaps["viridis" if comp.goal == "max" else "viridis_r"].with_extremes(bad=FAILED_GREY)
    low, high = bounds(comp.metric)
    finite = data.compressed()
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    # a mesh of cells, not an image: an image is resampled to the 300-dpi canvas (seconds at 40 x 40)
    image = ax.pcolormesh(np.arange(len(cols) + 1) - 0.5, np.arange(len(rows) + 1) - 0.5, data, cmap=cmap,
                          vmin=low, vmax=high)  # fmt: skip
    ax.set_facecolor(FAILED_GREY)  # a masked cell is left undrawn: the grey behind it shows
    ax.invert_yaxis()  # the best row on top
    size = 4.5 if len(cols) > 20 or len(rows) > 20 else 6
    for (i, j), value in np.ndenumerate(data.filled(np.nan)):
        if math.isfinite(value):
            shade = image.norm(value)
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=size,
                    color="black" if shade > 0.6 else "white", in_layout=False)  # fmt: skip
        elif (rows[i], cols[j]) not in comp.cells:  # missing: hatched white, unlike a failed cell's grey
            ax.add_patch(
                Rectangle(
                    (j - 0.5, i - 0.5), 1, 1, facecolor="white", hatch="///", edgecolor="#999999", in_layout=False
                )
            )
    labels = [f"{row_label(comp, r)}  {comp.iqm[r][0]:.2f}" if r in comp.iqm else row_label(comp, r) for r in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_xticks(range(len(cols)), [col_label(comp, c) for c in cols], fontsize=7, rotation=90)
    if ranked and others:
        ax.axhline(len(ranked) - 0.5, color="black", linewidth=1.5)
    top = blended_transform_factory(ax.transData, ax.transAxes)
    start = 0
    for category, group in groups:
        end = start + len(group)
        if start:
            ax.axvline(start - 0.5, color="white", linewidth=2)
        if category is not None:
            ax.plot([start - 0.4, end - 0.6], [1.01, 1.01], color="black", linewidth=1, transform=top, clip_on=False)
            ax.text((start + end - 1) / 2, 1.02, category.replace("_", "-"), ha="center", va="bottom", fontsize=8,
                    transform=top)  # fmt: skip
        start = end
    ax.tick_params(length=0)
    fig.colorbar(image, ax=ax, label=value_label, fraction=0.04, pad=0.01)
    below = ("; below the line, rows without an IQM (a cell failing its precondition or missing), by the IQM of "
             "the cells they have" if others else "")  # fmt: skip
    fig.suptitle(
        f"{comp.aggregate} over seeds per cell; rows by their IQM over columns x seeds (after the name), best "
        f"first{below}; grey: fails its precondition (not ranked); hatched: no run",
        fontsize=8, wrap=True,
    )  # fmt: skip
    return fig
