"""PNG plots of a comparison (matplotlib Figures on the Agg canvas: no display needed, no
backend selected).

Runs are drawn in small multiples, one panel per encoding family (absolute, rotary, bias,
relative; NoPE, the no-position reference, in every family panel as a grey line) plus one
panel per rotary encoding with its inference-time scalings, so no panel holds more than
about nine lines.
Shaded bands are mean ± spread (seed-to-seed standard deviation, or with one seed the
bootstrap over evaluation windows).

- ``ppl_vs_length.png``: perplexity against evaluation length;
- ``ppl_ratio.png``: ppl(P)/ppl(L) at the probe length for every run, sorted, with error bars
  beside a panel of each run's in-length perplexity (runs poor at L drawn hollow);
- ``training_curves.png``: training loss against step;
- ``entropy_vs_length.png``: attention entropy against length, with uniform attention.

``draw_*`` return the matplotlib Figure (tests read the data drawn); ``plot_*`` save it.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..eval.inference_scaling import run_label
from .axes import coinciding, integer_x, length_axis, log_axis, new_figure, panel_styles, save_png
from .ratio_plot import _number, config_train_len, draw_ppl_ratio, plot_ppl_ratio, ratio_points  # noqa: F401  # noqa: F401

FAMILY_TITLES = {"absolute": "absolute positions", "rotary": "rotary", "bias": "distance biases",
                 "relative": "relative (content-position)", "none": "no positions",
                 "plan": "per-layer plans (hybrids, windows)"}
REFERENCE = "nope"
#: the run drawn beside the per-layer plans, all of whose layers are RoPE
PLAN_REFERENCE = "rope"
#: the perplexity axis stops at this multiple of the median training-length perplexity;
#: points above it are drawn at the edge as arrows labelled with their value
PPL_AXIS_CAP = 30.0
#: a legend says "(same as X)" only when every number equals X's to this relative precision:
#: runs identical by construction (learned and hierarchical within L), never look-alikes
IDENTICAL = 1e-9
CAPTIONS = {
    "ppl_vs_length.png": "Perplexity on held-out text against evaluation length, one panel "
    "per encoding family (NoPE in grey in each) and one per rotary encoding with its "
    "inference-time scalings; shaded: mean ± spread (one seed: bootstrap over the text, "
    "which every run shares, so the report compares runs by paired differences); x: the "
    "last length a learned table serves; arrows: values above the axis.",
    "ppl_ratio.png": "How much each run degrades at the probe length: ppl(P)/ppl(L), error "
    "bars mean ± spread; 1 = no loss, dotted line = 10 % worse; right panel: each run's "
    "in-length perplexity ppl(L), hollow in both panels when more than 10 % above the best "
    "run's (a small ratio from a model poor at L is no win), and its perplexity at L and P.",
    "training_curves.png": "Training loss against step per encoding family; bold: moving "
    "average of the mean over seeds, shaded: range over seeds.",
    "entropy_vs_length.png": "Attention entropy of the last quarter of queries against "
    "length; dotted: uniform attention.",
}


def _family(run: dict) -> str:
    """A run's panel: the ``family`` its results record (a lab variant's, "plan"), else its
    encoding's."""
    from ..encodings import encoding_class
    if run.get("family"):
        return run["family"]
    try:
        return encoding_class(run["encoding"]).family
    except (KeyError, ValueError):
        return "none"


def panels(runs: list[dict]) -> list[tuple[str, list[dict]]]:
    """(title, runs) per panel: each family present, then RoPE-family scalings if any."""
    trained = [r for r in runs if not r.get("inference_scaling")]
    ref = [r for r in trained if r["encoding"] == REFERENCE]
    out = []
    for family in ("absolute", "rotary", "bias", "relative", "plan"):
        members = [r for r in trained if _family(r) == family]
        if family == "plan" and members:   # plans are read against the all-RoPE stack
            members = [r for r in trained if r["encoding"] == PLAN_REFERENCE] + members
        if members:
            out.append((FAMILY_TITLES[family], ref + members))
    scaled = [r for r in runs if r.get("inference_scaling")]
    for base in dict.fromkeys(r["encoding"] for r in scaled):    # one panel per base
        out.append((f"{base} + inference-time scaling (no retraining)",
                    [r for r in trained if r["encoding"] == base]
                    + [r for r in scaled if r["encoding"] == base]))
    if not out and trained:
        out.append(("each encoding", trained))
    return out


def _grid(n: int, width: float = 5.6, height: float = 4.6):
    cols = min(3, n)
    rows = -(-n // cols)
    fig = new_figure(figsize=(width * cols, height * rows + 0.6), dpi=100)
    axes = fig.subplots(rows, cols, squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def ppl_points(run: dict) -> list[tuple[int, float, float]]:
    """(length, mean, spread) for every finite perplexity of a run, by length."""
    spread = run.get("ppl_spread") or {}
    pts = []
    for n, v in run.get("ppl", {}).items():
        if _number(v) is not None:
            s = _number(spread.get(n))
            pts.append((int(n), float(v), s if s is not None else 0.0))
    return sorted(pts)


def _palette() -> list:
    """Colours for the runs of one panel, none of them grey (grey is NoPE's, the reference):
    tab10 without its grey, then tab20's lighter shades of the same hues."""
    import matplotlib
    dark = [c for i, c in enumerate(matplotlib.colormaps["tab10"].colors) if i != 7]
    light = [c for i, c in enumerate(matplotlib.colormaps["tab20"].colors)
             if i % 2 == 1 and i != 15]
    return dark + light


def _styles(panel_runs: list[dict]) -> dict[str, dict]:
    """One style per run of a panel: a distinct colour for each (:func:`_palette`, 18
    colours), grey only for NoPE."""
    labels = [run_label(r, spaced=True) for r in panel_runs if r["encoding"] != REFERENCE
              or r.get("inference_scaling")]
    styles = panel_styles(labels)
    colors = _palette()
    for i, label in enumerate(labels):
        styles[label]["color"] = colors[i % len(colors)]
    styles[REFERENCE] = {"color": "0.55", "marker": ".", "linestyle": "-", "linewidth": 1.4,
                         "markersize": 5}
    return styles


def _ppl_panel(ax, panel_runs: list[dict], lengths: list[int], train_len, top, ylim,
               title: str) -> None:
    styles = _styles(panel_runs)
    same = coinciding({run_label(r, spaced=True): [p[1] for p in ppl_points(r)]
                       for r in panel_runs}, rel=IDENTICAL)
    for run in panel_runs:
        pts = ppl_points(run)
        if not pts:
            continue
        label = run_label(run, spaced=True)
        style = styles[label]
        cut = sorted(int(n) for n, v in run.get("ppl", {}).items()
                     if isinstance(v, str) and v.startswith("n/a"))
        xs = [p[0] for p in pts]
        ys = [min(p[1], top) if top else p[1] for p in pts]
        legend = label + (f" (n/a from {cut[0]})" if cut else "") + (
            f" (same as {same[label]})" if label in same else "")
        ax.plot(xs, ys, label=legend, **style)
        lo = [max(p[1] - p[2], 1e-9) for p in pts]
        hi = [p[1] + p[2] for p in pts]
        if top:
            lo, hi = [min(v, top) for v in lo], [min(v, top) for v in hi]
        ax.fill_between(xs, lo, hi, color=style["color"], alpha=0.18, linewidth=0)
        if cut:          # the table ends: mark the last length it can serve
            ax.plot(xs[-1], ys[-1], marker="x", markersize=13, markeredgewidth=2.5,
                    color=style["color"], linestyle="none")
        for x, (_, y, _) in zip(xs, pts):
            if top and y > top:
                ax.plot(x, top, marker="^", markersize=9, linestyle="none", color=style["color"])
                ax.annotate(f"{y:,.0f}", (x, top), textcoords="offset points", xytext=(0, -15),
                            ha="center", fontsize=8, color=style["color"])
    if ylim:
        log_axis(ax, "y", *ylim)
    length_axis(ax, lengths, train_len)
    ax.set_ylabel("perplexity (log scale, lower is better)")
    ax.set_title(title, fontsize=11)
    ax.legend(loc="best", fontsize=8, frameon=True, framealpha=0.85)


def draw_ppl_vs_length(results: dict):
    runs = results.get("runs", [])
    train_len = config_train_len(results)
    lengths = sorted({int(n) for r in runs for n in r.get("ppl", {})})
    at_train = sorted(v for r in runs for n, v, _ in ppl_points(r) if n == train_len)
    everything = [v for r in runs for _, v, _ in ppl_points(r)]
    top, ylim = None, None
    if at_train and everything:
        cap = PPL_AXIS_CAP * at_train[len(at_train) // 2]
        top = cap if max(everything) > cap else None
    if everything:                 # one range for every panel
        lows = [max(v - s, 1e-9) for r in runs for _, v, s in ppl_points(r)]
        ylim = (min(lows) / 1.08, min(max(everything), top or math.inf) * 1.15)
    groups = panels(runs)
    fig, axes = _grid(max(1, len(groups)))
    for ax, (title, members) in zip(axes, groups):
        _ppl_panel(ax, members, lengths, train_len, top, ylim, title)
    fig.suptitle(f"Train at L = {train_len}, test longer: perplexity on held-out data "
                 "(shaded: mean ± spread)", fontsize=13)
    fig.tight_layout()
    return fig


def smooth(values: list[float], span: float = 0.05) -> list[float]:
    """Centered moving average over ``span`` of the points, the window kept symmetric near
    the ends (it shrinks on both sides, down to the end point itself), so a trend is not bent
    at the edges: a one-sided window there would average only earlier points and lift the
    end of a falling loss."""
    half = max(0, int(len(values) * span) // 2)
    n, out = len(values), []
    for i in range(n):
        h = min(half, i, n - 1 - i)
        window = values[i - h:i + h + 1]
        out.append(sum(window) / len(window))
    return out


def _raw_curve(run: dict) -> list[float]:
    """Every seed's training losses, unsmoothed, one list (to tell identical runs apart from
    runs that merely look alike after smoothing)."""
    curves = [s.get("curve") for s in (run.get("seeds") or []) if s.get("curve")]
    curves = curves or ([run["curve"]] if run.get("curve") else [])
    return [float(p[1]) for c in curves for p in c]


def curve_band(run: dict) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, smoothed mean loss, smoothed min, smoothed max) over a run's seeds."""
    curves = [s.get("curve") for s in (run.get("seeds") or []) if s.get("curve")]
    curves = curves or ([run["curve"]] if run.get("curve") else [])
    if not curves:
        return [], [], [], []
    steps = [int(p[0]) for p in curves[0]]
    curves = [c for c in curves if [int(p[0]) for p in c] == steps]
    cols = list(zip(*[[p[1] for p in c] for c in curves]))
    return (steps, smooth([sum(c) / len(c) for c in cols]), smooth([min(c) for c in cols]),
            smooth([max(c) for c in cols]))


def draw_training_curves(results: dict):
    trained = [r for r in results.get("runs", []) if not r.get("inference_scaling")]
    groups = [(t, [r for r in m if not r.get("inference_scaling")])
              for t, m in panels(trained)]
    fig, axes = _grid(max(1, len(groups)), width=5.6, height=4.0)
    values = [v for r in trained for v in curve_band(r)[1]]
    all_steps = [s for r in trained for s in curve_band(r)[0]]
    for ax, (title, members) in zip(axes, groups):
        styles = _styles(members)
        same = coinciding({r["encoding"]: _raw_curve(r) for r in members}, rel=IDENTICAL)
        for i, run in enumerate(members):
            steps, mean, lo, hi = curve_band(run)
            if not steps:
                continue
            every = max(1, len(steps) // 8)          # staggered markers: coinciding lines
            style = {**styles[run_label(run, spaced=True)],      # stay distinguishable
                     "markevery": ((i * every) // max(1, len(members)), every)}
            ax.plot(steps, mean, label=run["encoding"] + (
                f" (same as {same[run['encoding']]})" if run["encoding"] in same else ""),
                **style)
            ax.fill_between(steps, lo, hi, color=style["color"], alpha=0.2, linewidth=0)
        ax.set_xlabel("training step")
        ax.set_ylabel("training loss (nats/token)")
        if all_steps:
            integer_x(ax, min(all_steps), max(all_steps))
        if values:
            tail = sorted(values)[: max(1, len(values) // 2)]
            ax.set_ylim(min(values) * 0.97, max(tail[-1] * 1.6, min(values) * 1.2))
        ax.set_title(title, fontsize=11)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8, frameon=True, framealpha=0.85)
    fig.suptitle(f"Training curves at L = {config_train_len(results)} "
                 "(same data and budget; moving average, shaded: range over seeds)",
                 fontsize=12)
    fig.tight_layout()
    return fig


def entropy_points(run: dict) -> list[tuple[int, float, float, float | None]]:
    """(length, tail entropy, spread, uniform tail entropy) where measured."""
    pts = []
    for n, entry in (run.get("entropy") or {}).items():
        if isinstance(entry, dict) and entry.get("tail") is not None:
            pts.append((int(n), float(entry["tail"]), float(entry.get("tail_spread") or 0.0),
                        entry.get("uniform_tail")))
    return sorted(pts)


def draw_entropy_vs_length(results: dict):
    runs = [r for r in results.get("runs", []) if r.get("entropy")]
    if not runs:
        return None
    train_len = config_train_len(results)
    groups = panels(runs)
    fig, axes = _grid(max(1, len(groups)), width=8.0, height=4.2)
    for ax, (title, members) in zip(axes, groups):
        styles = _styles(members)
        lengths, uniform = set(), {}
        for run in members:
            pts = entropy_points(run)
            if not pts:
                continue
            lengths.update(p[0] for p in pts)
            uniform.update({p[0]: p[3] for p in pts})
            label = run_label(run, spaced=True)
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                        label=label, capsize=3, **styles[label])
        xs = sorted(n for n in uniform if uniform[n] is not None)
        if xs:
            ax.plot(xs, [uniform[n] for n in xs], color="black", linestyle=":",
                    linewidth=1.5, label="uniform attention")
        length_axis(ax, sorted(lengths), train_len)
        ax.set_ylabel("tail attention entropy (nats)")
        ax.set_title(title, fontsize=11)
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False,
                  borderaxespad=0.0)           # beside the panel: never over the data
    fig.suptitle("Attention entropy against length (higher = more diffuse attention)",
                 fontsize=13)
    fig.tight_layout()
    return fig


def _save(fig, path: Path) -> Path | None:
    if fig is None:
        return None
    return save_png(fig, path)


def plot_ppl_vs_length(results: dict, path: Path) -> Path:
    return _save(draw_ppl_vs_length(results), path)


def plot_training_curves(results: dict, path: Path) -> Path:
    return _save(draw_training_curves(results), path)


def plot_entropy_vs_length(results: dict, path: Path) -> Path | None:
    return _save(draw_entropy_vs_length(results), path)


def plot_all(results: dict, out_dir: Path) -> list[Path]:
    """Every plot of a comparison into ``out_dir``; returns the paths written."""
    out_dir = Path(out_dir)
    paths = [plot_ppl_vs_length(results, out_dir / "ppl_vs_length.png"),
             plot_ppl_ratio(results, out_dir / "ppl_ratio.png"),
             plot_training_curves(results, out_dir / "training_curves.png"),
             plot_entropy_vs_length(results, out_dir / "entropy_vs_length.png")]
    return [p for p in paths if p is not None]
