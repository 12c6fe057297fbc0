"""Figures and axis helpers shared by posenc's plots: :func:`new_figure` and :func:`save_png`,
which every posenc figure is made and written with, readable log ticks, length axes, styles.

Figures are :class:`matplotlib.figure.Figure` objects on the Agg canvas, never pyplot's: drawing
them needs no display, and neither selects a backend nor touches pyplot's list of open figures,
so importing posenc leaves the user's matplotlib setup as it was.

Every log axis carries several labelled ticks whatever its range; length axes label each
evaluated length (and its multiple of L); lines in one panel get distinct colours, markers and
dash patterns so coinciding lines stay distinguishable.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, MaxNLocator, NullLocator

from ..runio import atomic_write_with

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
DASHES = ("-", "--", "-.", ":")


def panel_styles(labels: list[str]) -> dict[str, dict]:
    """One style per label: tab10 colour, a marker and a dash pattern, all cycling at
    different periods so no two of the first 40 labels look alike."""
    colors = matplotlib.colormaps["tab10"].colors
    return {label: {"color": colors[i % 10], "marker": MARKERS[i % len(MARKERS)],
                    "linestyle": DASHES[(i // 10) % len(DASHES)], "linewidth": 1.8,
                    "markersize": 6}
            for i, label in enumerate(labels)}


def nice_log_ticks(low: float, high: float, at_least: int = 4) -> list[float]:
    """Tick values for a log axis over [low, high]: 1-2-5 (or finer) steps per decade, plain
    linear steps when the range is too narrow for those to give ``at_least`` ticks."""
    if not (low > 0 and high > low):
        return [low] if low > 0 else []
    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 8)):
        ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(low)) - 1,
                                              math.ceil(math.log10(high)) + 1)
                 for m in mantissas]
        ticks = [t for t in ticks if low <= t <= high]
        if len(ticks) >= at_least:
            return ticks
    ticks = [t for t in MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
             if low <= t <= high]
    return ticks


def tick_label(value: float) -> str:
    if value >= 1e5:
        return f"{value:.0e}"
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_ppl(value: float) -> str:
    """A perplexity in every posenc plot label: 3 significant digits, trailing zeros kept
    (``5.94``, ``6.00``, ``10.4``), whole numbers from 100 (``123``), ``inf``, ``nan``."""
    if not math.isfinite(value):
        return "inf" if value > 0 else "nan"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:#.3g}"


def log_axis(ax, which: str, low: float, high: float) -> None:
    """Log ``which`` ("x" or "y") axis over [low, high] with several labelled ticks and no
    minor tick labels."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    getattr(ax, f"set_{which}scale")("log")
    getattr(ax, f"set_{which}lim")(low, high)
    ticks = nice_log_ticks(low, high)
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    getattr(ax, f"set_{which}ticks")(ticks, [tick_label(t) for t in ticks])


def length_axis(ax, lengths: list[int], train_len: int | None) -> None:
    """Log2 x axis with one labelled tick per evaluated length, the training length marked."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lengths))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(lengths, [f"{n}\n(L)" if n == train_len else
                            (f"{n}\n({n // train_len}L)" if train_len and n % train_len == 0
                             else str(n)) for n in lengths])
    if lengths:
        ax.set_xlim(lengths[0] / 1.15, lengths[-1] * 1.15)
    if train_len:
        ax.axvline(train_len, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("evaluation length (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def integer_x(ax, low: int, high: int) -> None:
    """Integer ticks on an x axis that spans exactly [low, high] (training steps)."""
    ax.set_xlim(low, high)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6, steps=[1, 2, 5, 10]))


def coinciding(series: dict[str, list[float]], rel: float = 0.005) -> dict[str, str]:
    """For lines drawn on the same x values: label -> the earlier label it coincides with
    (every point within ``rel`` relative difference), so a legend can say so."""
    out: dict[str, str] = {}
    labels = list(series)
    for i, label in enumerate(labels):
        for other in labels[:i]:
            a, b = series[label], series[other]
            if other not in out and len(a) == len(b) and a and all(
                    abs(x - y) <= rel * max(abs(x), abs(y), 1e-12) for x, y in zip(a, b)):
                out[label] = other
                break
    return out


def new_figure(**kwargs) -> Figure:
    """A Figure (``kwargs`` as for :class:`~matplotlib.figure.Figure`: figsize, dpi, layout)
    drawn by the Agg canvas; nothing to close, garbage-collected like any object."""
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig, path: str | Path, dpi: float | None = None) -> Path:
    """Write ``fig`` to ``path`` as a PNG, atomically (:func:`posenc.runio.atomic_write_with`:
    a crash never leaves a truncated image); ``dpi`` None: the figure's. Returns ``path``."""
    path = Path(path)
    atomic_write_with(path, lambda f: fig.savefig(f, format="png", dpi=dpi))
    return path
