"""``ppl_ratio.png``: how much each run of a comparison degrades at the probe length.

ppl(P)/ppl(L) for every run, sorted, with error bars (mean ± spread), and each run's
perplexity at L and at P printed beside its ratio: a small ratio from a model that is poor
at L is no win (rope + linear:4 degrades little from a perplexity twice the others').
"""

from __future__ import annotations

import math
from pathlib import Path

from ..eval.inference_scaling import run_label
from .axes import log_axis, new_figure, save_png


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
        out[run_label(run, spaced=True)] = (f"{a:.3g} -> {b:.3g}" if a is not None and
                                            b is not None else
                                            f"{a:.3g} -> n/a" if a is not None else "")
    return out


def draw_ppl_ratio(results: dict):
    pts = ratio_points(results)
    train_len = config_train_len(results)
    lengths = sorted({int(n) for r in results.get("runs", []) for n in r.get("ppl", {})})
    probe = 8 * train_len if train_len and 8 * train_len in lengths else max(lengths, default=0)
    fig = new_figure(figsize=(11, 0.34 * max(6, len(pts)) + 1.6), dpi=100)
    ax = fig.subplots()
    measured = [p for p in pts if p[1] is not None]
    ys = list(range(len(pts)))[::-1]
    for y, (label, ratio, spread, note) in zip(ys, pts):
        if ratio is None:
            ax.annotate(f"{note}", (1.0, y), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=8, color="0.35")
            continue
        color = "tab:blue" if "+" not in label else "tab:orange"
        ax.errorbar([ratio], [y], xerr=[[min(spread, ratio * 0.999)], [spread]], fmt="o",
                    color=color, capsize=3, markersize=5)
    ax.set_yticks(ys, [p[0] for p in pts], fontsize=9)
    ppl = ppl_at_lengths(results, train_len, probe)
    for y, (label, *_rest) in zip(ys, pts):      # perplexity beside the ratio, right edge
        ax.annotate(ppl.get(label, ""), (1.0, y), xycoords=("axes fraction", "data"),
                    xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                    family="monospace")
    ax.annotate(f"ppl@{train_len} -> ppl@{probe}", (1.0, len(pts) - 0.3),
                xycoords=("axes fraction", "data"), xytext=(6, 4), textcoords="offset points",
                fontsize=8, fontweight="bold")
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
    fig.tight_layout()
    return fig


def plot_ppl_ratio(results: dict, path: Path) -> Path:
    return save_png(draw_ppl_ratio(results), path)
