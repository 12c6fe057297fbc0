"""What every atlas panel shares: the :class:`Panel` record, figures drawn with the Agg
canvas (no display, no global backend switch), log axes with labelled ticks, and the
conversion of tensors to plain JSON lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..viz.axes import new_figure as agg_figure
from ..viz.axes import save_png

#: pixels per inch of every atlas PNG (small files, readable at 100 % zoom)
DPI = 100


@dataclass
class Panel:
    """One atlas panel: its title, the PNG files it wrote (names relative to the atlas
    directory), a two-sentence caption, and the numbers drawn (plain JSON)."""

    name: str
    title: str
    caption: str
    images: list[str]
    data: dict[str, Any] = field(default_factory=dict)


def new_figure(width: float, height: float, rows: int = 1, cols: int = 1, **kw):
    """A matplotlib Figure on an Agg canvas and its axes (``Figure.subplots``; None when
    ``rows`` is 0, for a caller that lays out its own grid)."""
    fig = agg_figure(figsize=(width, height), dpi=DPI, layout="constrained")
    if rows == 0:
        return fig, None
    axes = fig.subplots(rows, cols, squeeze=False, **kw)
    return fig, axes


def save(fig, out_dir: Path, name: str) -> str:
    """Write ``fig`` to ``out_dir/name`` (a PNG, atomically) and return ``name``."""
    save_png(fig, Path(out_dir) / name, dpi=DPI)
    return name


def dress(ax, xlabel: str, ylabel: str, title: str, legend: str | None = None) -> None:
    """Label ``ax``, add a light grid and (with ``legend`` a matplotlib location) a legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if legend:
        ax.legend(fontsize=9, loc=legend)


def colormap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]


def log2_axis(ax, axis: str, lo: float, hi: float, labels: dict[float, str] | None = None
              ) -> None:
    """Log base-2 ``axis`` ("x" or "y") from lo to hi with a labelled tick at every power of
    two (every other one past 12 ticks); ``labels`` overrides some tick texts."""
    from matplotlib.ticker import FixedLocator, NullLocator

    first, last = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = 1 if last - first <= 12 else 2
    ticks = [2.0 ** e for e in range(first, last + 1, step)]
    texts = [(labels or {}).get(t, _power_text(t)) for t in ticks]
    getattr(ax, f"set_{axis}scale")("log", base=2)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_minor_locator(NullLocator())
    getattr(ax, f"set_{axis}ticklabels")(texts)
    getattr(ax, f"set_{axis}lim")(lo, hi)


def _power_text(value: float) -> str:
    if value >= 1:
        n = int(round(value))
        return f"{n // 1024}k" if n >= 8192 and n % 1024 == 0 else str(n)
    return f"1/{int(round(1 / value))}"


def as_json(value: Any, digits: int = 5) -> Any:
    """Tensors, arrays and nested containers as plain JSON (floats to ``digits``
    significant digits, non-finite floats as None)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = value.tolist() if value.dtype.is_floating_point or value.dim() else value.item()
        return as_json(value, digits)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return as_json(value.tolist(), digits)
    if isinstance(value, dict):
        return {str(k): as_json(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v, digits) for v in value]
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}")
    return value
