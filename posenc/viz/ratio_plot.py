"""``ppl_ratio.png``: how much each run of a comparison degrades at the probe length.

ppl(P)/ppl(L) for every run, sorted, with error bars (mean ± spread), beside a second panel
with each run's in-length perplexity ppl(L) and its perplexities at L and at P printed: a
small ratio from a model that is poor at L is no win (rope + linear:4 degrades little from a
perplexity well above the others'). Runs whose ppl(L) is more than :data:`POOR_AT_L` times the
best run's are drawn hollow in both panels. Perplexities are printed by one rule
(:func:`posenc.viz.axes.format_ppl`, 3 significant digits).
"""

from __future__ import annotations

import math
from pathlib import Path

from ..eval.inference_scaling import run_label
from .axes import format_ppl, log_axis, new_figure, save_png

#: a run is "poor at L" (drawn hollow) when its ppl(L) exceeds this times the best run's
POOR_AT_L = 1.10


def config_train_len(results: dict) -> int | None:
    """The training length of a comparison's results (``config.train.train_len``)."""
    return (results.get("config", {}).get("train") or {}).get("train_len")


def _number(value) -> float | None:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def ratio_points(results: dict) -> list[tuple[str, float | None, float, str | None]]:
    """(label, ppl(P)/ppl(L), spread, n/a note) per run, best first; P = 8L or the longest.

    The spread is the std of per-seed ratios with two or more seeds, else the run's
    ``ratio_spread`` (paired bootstrap), else propagated from the two perplexities' spreads
    (relative errors added in quadrature)."""
    train_len = int(config_train_len(results) or 0)
    lengths = sorted({int(n) for r in results.get("runs", []) for n in r.get("ppl", {})})
    probe = 8 * train_len if 8 * train_len in lengths else (lengths[-1] if lengths else 0)
    out = []
    for run in results.get("runs", []):
        a, b = run.get("ppl", {}).get(str(probe)), run.get("ppl", {}).get(str(train_len))
        if _number(a) is None or _number(b) is None:
            note = a if isinstance(a, str) else "n/a"
            out.append((run_label(run, spaced=True), None, 0.0, note))
            continue
        seeds = run.get("seeds") or []
        per_seed = []
        for s in seeds:
            pa = _number(s.get("ppl", {}).get(str(probe)))
            pb = _number(s.get("ppl", {}).get(str(train_len)))
            if pa is not None and pb:
                per_seed.append(pa / pb)
        ratio = a / b
        if len(per_seed) >= 2:
            ratio = sum(per_seed) / len(per_seed)
            spread = math.sqrt(sum((x - ratio) ** 2 for x in per_seed) / (len(per_seed) - 1))
        elif _number((run.get("ratio_spread") or {}).get(str(probe))) is not None:
            spread = run["ratio_spread"][str(probe)]
        else:
            sp = run.get("ppl_spread") or {}
            sa, sb = _number(sp.get(str(probe))) or 0.0, _number(sp.get(str(train_len))) or 0.0
            spread = ratio * math.hypot(sa / a, sb / b)
        out.append((run_label(run, spaced=True), ratio, spread, None))
    return sorted(out, key=lambda p: (p[1] is None, p[1] or 0.0))


def ppl_at_lengths(results: dict, train_len, probe) -> dict[str, str]:
    """label -> ``"7.12 -> 9.80"``: a run's perplexity at L and at the probe length, so a
    good ratio from a model that is poor at L is seen as such."""
    out = {}
    for run in results.get("runs", []):
        a, b = (_number(run.get("ppl", {}).get(str(n))) for n in (train_len, probe))
        out[run_label(run, spaced=True)] = (
            f"{format_ppl(a)} -> {format_ppl(b) if b is not None else 'n/a'}"
            if a is not None else "")
    return out


def in_length_ppl(results: dict, train_len) -> dict[str, float]:
    """label -> ppl(L), for the runs measured at L."""
    out = {}
    for run in results.get("runs", []):
        value = _number(run.get("ppl", {}).get(str(train_len)))
        if value is not None:
            out[run_label(run, spaced=True)] = value
    return out


def poor_at_length(results: dict, train_len) -> set[str]:
    """Labels whose ppl(L) is above POOR_AT_L times the best run's ppl(L)."""
    at_l = in_length_ppl(results, train_len)
    best = min(at_l.values(), default=math.nan)
    return {label for label, v in at_l.items() if v > POOR_AT_L * best}


def draw_ppl_ratio(results: dict):
    """The figure: ratio panel first (``fig.axes[0]``), in-length perplexity panel second."""
    pts = ratio_points(results)
    train_len = config_train_len(results)
    lengths = sorted({int(n) for r in results.get("runs", []) for n in r.get("ppl", {})})
    probe = 8 * train_len if train_len and 8 * train_len in lengths else max(lengths, default=0)
    fig = new_figure(figsize=(12, 0.34 * max(6, len(pts)) + 1.8), dpi=100)
    ax, at_ax = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 1.3]})
    measured = [p for p in pts if p[1] is not None]
    ys = list(range(len(pts)))[::-1]
    at_l = in_length_ppl(results, train_len)
    poor = poor_at_length(results, train_len)
    for y, (label, ratio, spread, note) in zip(ys, pts):
        color = "tab:blue" if "+" not in label else "tab:orange"
        face = "white" if label in poor else color
        if label in at_l:
            at_ax.plot([at_l[label]], [y], "o", color=color, markerfacecolor=face,
                       markersize=5)
        if ratio is None:
            ax.annotate(f"{note}", (1.0, y), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=8, color="0.35")
            continue
        ax.errorbar([ratio], [y], xerr=[[min(spread, ratio * 0.999)], [spread]], fmt="o",
                    color=color, markerfacecolor=face, capsize=3, markersize=5)
    ax.set_yticks(ys, [p[0] for p in pts], fontsize=9)
    ppl = ppl_at_lengths(results, train_len, probe)
    for y, (label, *_rest) in zip(ys, pts):      # perplexities beside the panels, right edge
        at_ax.annotate(ppl.get(label, ""), (1.0, y), xycoords=("axes fraction", "data"),
                       xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                       family="monospace")
    at_ax.annotate(f"ppl@{train_len} -> ppl@{probe}", (1.0, len(pts) - 0.3),
                   xycoords=("axes fraction", "data"), xytext=(6, 4),
                   textcoords="offset points", fontsize=8, fontweight="bold")
    if measured:
        lo = min(min(p[1] - p[2] for p in measured), 1.0) / 1.15
        hi = max(max(p[1] + p[2] for p in measured), 1.1) * 1.15
        log_axis(ax, "x", max(lo, 1e-3), hi)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.axvline(1.1, color="grey", linestyle=":", linewidth=1)
    ax.set_ylim(-0.7, len(pts) - 0.3)
    label_box = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"}
    ax.annotate("no loss", (1.0, len(pts) - 0.3), xytext=(-4, -10), textcoords="offset points",
                ha="right", fontsize=8, bbox=label_box)
    ax.annotate("10 % worse", (1.1, len(pts) - 0.3), xytext=(4, -10),
                textcoords="offset points", ha="left", fontsize=8, color="0.35", bbox=label_box)
    ax.set_xlabel(f"ppl({probe}) / ppl({train_len})  (log scale, lower is better)")
    ax.set_title(f"Degradation at {probe} tokens, trained at L = {train_len}\n"
                 "blue: trained encodings, orange: rotary + inference-time scaling",
                 fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    if at_l:
        best = min(at_l.values())
        log_axis(at_ax, "x", best / 1.1, max(max(at_l.values()), POOR_AT_L * best) * 1.15)
        at_ax.axvline(POOR_AT_L * best, color="grey", linestyle=":", linewidth=1)
    at_ax.set_xlabel(f"ppl({train_len}): quality within L (log scale)")
    at_ax.set_title(f"In-length perplexity\nhollow: > {POOR_AT_L:.2f} x the best "
                    f"({format_ppl(min(at_l.values())) if at_l else 'n/a'})", fontsize=10)
    at_ax.grid(True, axis="x", alpha=0.3)
    at_ax.tick_params(axis="y", left=False)
    fig.tight_layout(rect=(0, 0, 1 - 1.4 / fig.get_size_inches()[0], 1))   # room: ppl text
    return fig


def plot_ppl_ratio(results: dict, path: Path) -> Path:
    return save_png(draw_ppl_ratio(results), path)
