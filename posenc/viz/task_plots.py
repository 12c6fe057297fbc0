"""The task study's figure: accuracy against test length, one column per part and task
(exact match on top, token accuracy below).

Each line is an encoding's mean over seeds, with error bars of ± the spread
(:mod:`posenc.lab.tasks.verdicts`); lines are nudged sideways by a fraction of the gap
between the closest two test lengths (at most 4 %) so that encodings with equal values
(often all at 0 far past the training length) stay distinguishable, and each has its own
marker; a panel notes the lengths where every encoding has the same value. The training
length is marked.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
from matplotlib.ticker import FixedLocator, NullLocator

from ..errors import UserError
from .axes import new_figure, save_png

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
TITLES = {"lm": "decoder-only", "seq2seq": "encoder-decoder"}


METRIC_LABELS = {"exact_match": "exact match", "token_accuracy": "token accuracy"}


def panel_series(results: dict, part: str, task: str, metric: str = "exact_match"
                 ) -> dict[str, list[tuple]]:
    """{encoding: [(length, mean, spread), ...]} for one panel, from results["summary"]."""
    table = results.get("summary", {}).get(part, {}).get(task, {})
    return {enc: sorted((int(n), s["mean"], s["spread"])
                        for n, s in entry[metric].items())
            for enc, entry in table.items() if entry[metric]}


def _panels(results: dict) -> list[tuple[str, str]]:
    return [(part, task) for part, tasks in results.get("summary", {}).items()
            for task in tasks if panel_series(results, part, task)]


def _train_len(results: dict, part: str) -> int:
    cfg = results["config"]                     # L is each part's train.max_len
    return cfg["train" if part == "lm" else "seq2seq_train"]["max_len"]


def coinciding(series: dict[str, list[tuple]]) -> list[int]:
    """Lengths where every encoding (two or more) has the same mean, to the plotted 0.005."""
    if len(series) < 2:
        return []
    means: dict[int, list[float]] = {}
    for pts in series.values():
        for n, m, _ in pts:
            means.setdefault(n, []).append(m)
    return sorted(n for n, ms in means.items()
                  if len(ms) == len(series) and max(ms) - min(ms) < 0.005)


#: the most two neighbouring lines are nudged apart (log of the factor between them)
MAX_NUDGE = math.log(1.04)


def nudge_step(lengths: list[int], lines: int) -> float:
    """Log-factor between neighbouring lines' x positions: at most :data:`MAX_NUDGE`, and
    small enough that all ``lines`` together span under a third of the closest two lengths'
    gap, so every point stays nearer its own length than the next one."""
    if lines < 2:
        return 0.0
    gaps = [math.log(b / a) for a, b in zip(lengths, lengths[1:])]
    return min(MAX_NUDGE, min(gaps, default=MAX_NUDGE) / 3 / (lines - 1))


def _draw(ax, results: dict, part: str, task: str, colors: dict[str, tuple],
          metric: str) -> None:
    series = panel_series(results, part, task, metric)
    base = _train_len(results, part)
    lengths = sorted({n for pts in series.values() for n, _, _ in pts})
    k = len(series)
    step = nudge_step(lengths, k)
    for i, (enc, pts) in enumerate(series.items()):
        nudge = math.exp(step * (i - (k - 1) / 2))        # multiplicative: log x axis
        ax.errorbar([n * nudge for n, _, _ in pts], [m for _, m, _ in pts],
                    yerr=[[min(s, m) for _, m, s in pts],          # bars kept in [0, 1]
                          [min(s, 1 - m) for _, m, s in pts]], label=enc, color=colors[enc],
                    marker=MARKERS[list(colors).index(enc) % len(MARKERS)], markersize=6,
                    linewidth=1.8, capsize=3, alpha=0.9)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lengths))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{n}\n(L)" if n == base else f"{n}\n({n / base:g}L)"
                        for n in lengths], fontsize=8)
    ax.set_xlim(lengths[0] / 1.2, lengths[-1] * 1.2)
    ax.axvline(base, color="grey", linestyle=":", linewidth=1)
    ax.set_ylim(-0.05, 1.05)
    ax.yaxis.set_major_locator(FixedLocator([0, 0.2, 0.4, 0.6, 0.8, 1.0]))
    ax.set_xlabel("test length (source letters)" if part == "seq2seq"
                  else "test length (tokens)")
    ax.set_ylabel(METRIC_LABELS[metric])
    same = coinciding(series)
    ax.set_title(f"{TITLES[part]}: {task}, {METRIC_LABELS[metric]}", fontsize=10,
                 pad=14 if same else 6)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if same:                              # between the title and the axes: no point is there
        ax.text(0.5, 1.01, f"all encodings equal at {', '.join(map(str, same))}",
                transform=ax.transAxes, fontsize=7, ha="center", va="bottom",
                color="dimgrey")


def task_figure(results: dict):
    """The figure (a matplotlib Figure): one column per part and task, exact match on top
    and token accuracy below."""
    panels = _panels(results)
    if not panels:
        raise UserError("the results hold no scored runs to plot")
    encodings = list(dict.fromkeys(enc for part, task in panels
                                   for enc in panel_series(results, part, task)))
    palette = matplotlib.colormaps["tab10"].colors
    colors = {enc: palette[i % len(palette)] for i, enc in enumerate(encodings)}
    fig = new_figure(figsize=(max(7.0, 5.2 * len(panels)), 8.0))
    axes = fig.subplots(2, len(panels), squeeze=False)
    for col, (part, task) in enumerate(panels):
        for row, metric in enumerate(METRIC_LABELS):
            _draw(axes[row][col], results, part, task, colors, metric)
    n_seeds = len(results["config"]["seeds"])
    bars = ("± spread (seed std, or evaluation s.e. if larger)" if n_seeds >= 2
            else "± evaluation s.e. (one seed)")
    fig.suptitle(f"Accuracy against test length, mean of {n_seeds} seed"
                 f"{'s' if n_seeds != 1 else ''}\nbars {bars}; lines nudged apart; "
                 "dotted = training length L", fontsize=9)
    fig.tight_layout()
    return fig


def plot_task_accuracy(results: dict, path: Path) -> Path:
    """Write :func:`task_figure` to ``path`` and return ``path``."""
    return save_png(task_figure(results), path, dpi=120)
