"""Accuracy heat maps over context length and depth, one panel per method (the picture of the
needle-in-a-haystack test: Kamradt 2023).

:func:`accuracy_heatmaps` draws each method's grid (depth down, length across) on one shared
colour scale from 0 to 1 with one colour bar, every cell labelled with its accuracy, the title
saying how many trials each cell's rate is taken over, and the original context marked. Panels wrap into rows of at most :data:`MAX_COLUMNS`; the figure
grows with the grid so that labels stay readable from a 2 x 2 grid of one method to a dozen
methods on a 6 x 11 grid.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.colors import LinearSegmentedColormap

from .axes import new_figure

MAX_COLUMNS = 4
#: red (missed) through yellow to green (found), as the usual needle pictures
CMAP = LinearSegmentedColormap.from_list("needle", ["#c0392b", "#f4d03f", "#27ae60"])


def _length_label(n: int, original: int | None) -> str:
    text = f"{n // 1024}k" if n >= 4096 and n % 1024 == 0 else str(n)
    if original and n % original == 0:
        return f"{text}\n{n // original}x"
    return f"{text}\n{n / original:.2g}x" if original else text


def accuracy_heatmaps(grids: Mapping[str, Sequence[Sequence[float]]], lengths: Sequence[int],
                      depths: Sequence[float], title: str, original: int | None = None,
                      depth_label: str = "needle depth", per_cell: int | None = None,
                      trial: str = "needle", row_labels: Sequence[str] | None = None,
                      value_label: str = "accuracy"):
    """A Figure with one panel per method.

    ``grids[name][i][j]`` is the accuracy in [0, 1] at ``depths[i]`` and ``lengths[j]`` (NaN:
    not measured yet, drawn blank). ``original``: the context the methods extend from; its
    column is outlined. ``depth_label`` names the rows' axis. ``per_cell``: the trials (each a
    ``trial``) each cell's rate is taken over, said in the title (a cell of one trial can only
    be 0 % or 100 %). ``row_labels``: the rows' tick labels (default: the depths as
    percentages; e.g. method names when rows are methods); ``value_label`` names the colour
    bar. Returns the figure (save it with :func:`posenc.viz.axes.save_png`).
    """
    if per_cell is not None:
        title += f"; {per_cell} {trial}{'' if per_cell == 1 else 's'} per cell"
    names = list(grids)
    n_cols = max(1, min(MAX_COLUMNS, len(names)))
    n_rows = max(1, math.ceil(len(names) / n_cols))
    cell_w, cell_h = 0.62, 0.36
    labels = [f"{d:.0%}" for d in depths] if row_labels is None else list(row_labels)
    wide = 0.0 if row_labels is None else 0.06 * max(map(len, labels), default=0)
    panel_w = max(2.4, 1.0 + cell_w * len(lengths) + wide)
    panel_h = max(1.9, 1.1 + cell_h * len(depths))
    width = n_cols * panel_w + 0.9
    title = textwrap.fill(title, width=max(24, int(width * 9)))   # about 9 characters/inch
    fig = new_figure(figsize=(width, n_rows * panel_h + 0.5 + 0.2 * title.count("\n") + 0.2),
                     layout="constrained")
    axes = np.atleast_1d(fig.subplots(n_rows, n_cols, squeeze=False)).ravel()
    font = 8 if len(lengths) <= 6 else 7
    image = None
    for ax, name in zip(axes, names):
        acc = np.asarray(grids[name], dtype=float).reshape(len(depths), len(lengths))
        image = ax.imshow(acc, vmin=0.0, vmax=1.0, cmap=CMAP, aspect="auto",
                          interpolation="nearest")
        for i in range(len(depths)):
            for j in range(len(lengths)):
                if np.isfinite(acc[i, j]):
                    ax.text(j, i, f"{acc[i, j]:.0%}", ha="center", va="center",
                            fontsize=font, color="black")
        ax.set_xticks(range(len(lengths)), [_length_label(n, original) for n in lengths],
                      fontsize=font)
        ax.set_yticks(range(len(depths)), labels, fontsize=font)
        if original in lengths:
            j = list(lengths).index(original)
            ax.add_patch(_outline(ax, j, len(depths)))
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("context length (tokens)", fontsize=font)
        ax.set_ylabel(depth_label, fontsize=font)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes[:len(names)]), fraction=0.04, pad=0.02)
        bar.set_label(value_label, fontsize=font)
        bar.ax.tick_params(labelsize=font)
    fig.suptitle(title, fontsize=10)
    return fig


def _outline(ax, column: int, n_rows: int):
    from matplotlib.patches import Rectangle
    return Rectangle((column - 0.5, -0.5), 1, n_rows, fill=False, edgecolor="black",
                     linewidth=1.5, label="original context")


def panel_data(fig) -> dict[str, np.ndarray]:
    """Each visible panel's title and the accuracy grid its image draws (reading a figure
    back, e.g. in tests)."""
    return {ax.get_title(): np.asarray(ax.images[0].get_array(), dtype=float)
            for ax in fig.axes if ax.images and ax.get_visible()}
