"""PNG plots of a comparison (matplotlib, Agg backend: no display needed).

- ``ppl_vs_length.png``: perplexity against evaluation length, one line per run (trained
  encodings solid, RoPE inference-time scalings dashed), the training length marked;
- ``training_curves.png``: training loss against step, one line per encoding;
- ``entropy_vs_length.png``: attention entropy against length, with uniform attention.

Each function takes the ``results.json`` dict and an output path and returns the path.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402


def _label(run: dict) -> str:
    scaling = run.get("inference_scaling")
    return run["encoding"] + (f" + {scaling}" if scaling else "")


def _styles(runs: list[dict]) -> dict[str, dict]:
    """Trained encodings: solid lines in tab10 colours. Inference-time scalings: dashed lines
    with square markers in colours of their own, so the two groups never share a colour."""
    base = plt.get_cmap("tab10").colors
    scaled = [plt.get_cmap("Dark2").colors[i] for i in (0, 1, 2, 3, 5, 6, 4, 7)]
    styles, i, j = {}, 0, 0
    for run in runs:
        label = _label(run)
        if run.get("inference_scaling"):
            styles[label] = {"color": scaled[j % len(scaled)], "linestyle": "--",
                             "marker": "s", "linewidth": 1.8, "markersize": 5}
            j += 1
        else:
            styles[label] = {"color": base[i % len(base)], "linestyle": "-", "marker": "o",
                             "linewidth": 2.2, "markersize": 6}
            i += 1
    return styles


def _length_axis(ax, lengths: list[int], train_len: int | None) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lengths))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{n}\n(L)" if n == train_len else
                        (f"{n}\n({n // train_len}L)" if train_len and n % train_len == 0
                         else str(n)) for n in lengths])
    if train_len:
        ax.axvline(train_len, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("evaluation length (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def _number(value) -> float | None:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


#: the perplexity axis stops at this multiple of the median training-length perplexity;
#: lines above it are drawn to the edge and labelled with their value
PPL_AXIS_CAP = 30.0


def _ppl_points(run: dict) -> list[tuple[int, float]]:
    pts = [(int(n), _number(v)) for n, v in run.get("ppl", {}).items()]
    return sorted((n, v) for n, v in pts if v is not None)


def _clip_line(pts: list[tuple[int, float]], top: float | None
               ) -> tuple[list[float], list[float]]:
    """The line through ``pts`` up to where it leaves the axis at ``top`` (log-log)."""
    xs, ys = [pts[0][0]], [min(pts[0][1], top) if top else pts[0][1]]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if top is None or y1 <= top:
            xs.append(x1)
            ys.append(y1)
            continue
        if y0 < top:                        # crossing point, interpolated in log space
            t = (math.log(top) - math.log(y0)) / (math.log(y1) - math.log(y0))
            xs.append(math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))))
            ys.append(top)
        break
    return xs, ys


def _log_ticks(ax, low: float, high: float) -> None:
    """Readable ticks on a log y axis: 1-2-3-5 steps per decade, printed as plain numbers."""
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(low)) - 1,
                                          math.ceil(math.log10(high)) + 1)
             for m in (1, 1.5, 2, 3, 4, 5, 6, 8)]
    ticks = [t for t in ticks if low <= t <= high]
    if len(ticks) > 12:                     # a wide range: keep 1, 2, 5 per decade
        ticks = [t for t in ticks if round(t / 10 ** math.floor(math.log10(t)), 3)
                 in (1, 2, 5)]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([f"{t:g}" if t < 1e5 else f"{t:.0e}" for t in ticks])


def _ppl_panel(ax, runs: list[dict], styles: dict, lengths: list[int], train_len: int | None,
               top: float | None, title: str, ylim: tuple[float, float] | None) -> None:
    values = []
    for run in runs:
        pts = _ppl_points(run)
        if not pts:
            continue
        label = _label(run)
        cut = sorted(int(n) for n, v in run.get("ppl", {}).items()
                     if isinstance(v, str) and v.startswith("n/a"))
        legend = label + (f" (n/a from {cut[0]})" if cut else "")
        xs, ys = _clip_line(pts, top)
        values += ys
        ax.plot(xs, ys, label=legend, **styles[label])
        if cut:          # the table ends: mark the last length it can serve
            ax.plot(pts[-1][0], pts[-1][1], marker="x", markersize=13, markeredgewidth=2.5,
                    color=styles[label]["color"], linestyle="none")
        for x, y in pts:
            if top and y > top:      # off the chart: an arrow at the edge with the value
                ax.plot(x, top, marker="^", markersize=9, linestyle="none",
                        color=styles[label]["color"])
                ax.annotate(f"{y:,.0f}", (x, top), textcoords="offset points", xytext=(0, -15),
                            ha="center", fontsize=8, color=styles[label]["color"])
    if values and ylim:
        ax.set_yscale("log")
        ax.set_ylim(*ylim)
        _log_ticks(ax, *ylim)
    if lengths:
        _length_axis(ax, lengths, train_len)
    if ax.get_subplotspec().is_first_col():
        ax.set_ylabel("perplexity (log scale, lower is better)")
    ax.set_title(title, fontsize=11)
    ax.legend(loc="upper left", fontsize=8.5, frameon=True, framealpha=0.85)


def plot_ppl_vs_length(results: dict, path: Path) -> Path:
    """Left: every trained encoding. Right (if any): RoPE and its inference-time scalings."""
    runs = results.get("runs", [])
    train_len = results.get("config", {}).get("train_len")
    lengths = sorted({int(n) for r in runs for n in r.get("ppl", {})})
    styles = _styles(runs)
    at_train = sorted(v for r in runs for n, v in _ppl_points(r) if n == train_len)
    everything = [v for r in runs for _, v in _ppl_points(r)]
    top, ylim = None, None
    if at_train and everything:
        cap = PPL_AXIS_CAP * at_train[len(at_train) // 2]
        top = cap if max(everything) > cap else None
    if everything:                 # one range for both panels
        ylim = (min(everything) / 1.08, min(max(everything), top or math.inf) * 1.12)
    trained = [r for r in runs if not r.get("inference_scaling")]
    scaled = [r for r in runs if r.get("inference_scaling")]
    families = sorted({r["encoding"] for r in scaled})
    panels = 2 if scaled else 1
    fig, axes = plt.subplots(1, panels, figsize=(7.5 * panels, 6), dpi=110, squeeze=False,
                             sharey=True)
    _ppl_panel(axes[0, 0], trained, styles, lengths, train_len, top,
               "each encoding, trained the same way", ylim)
    if scaled:
        base = [r for r in trained if r["encoding"] in families]
        _ppl_panel(axes[0, 1], base + scaled, styles, lengths, train_len, top,
                   f"{', '.join(families)} + inference-time scaling (no retraining)", ylim)
    fig.suptitle(f"Train at L = {train_len}, test longer: perplexity on held-out data",
                 fontsize=13)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def _smooth(values: list[float], span: float = 0.05) -> list[float]:
    """Centered moving average over ``span`` of the points (at least 1, edges shrink)."""
    half = max(0, int(len(values) * span) // 2)
    out = []
    for i in range(len(values)):
        window = values[max(0, i - half):i + half + 1]
        out.append(sum(window) / len(window))
    return out


def plot_training_curves(results: dict, path: Path) -> Path:
    runs = [r for r in results.get("runs", []) if not r.get("inference_scaling")]
    styles = _styles(results.get("runs", []))
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    values = []
    for run in runs:
        curve = run.get("curve") or []
        if not curve:
            continue
        steps, losses = zip(*curve)
        values += losses
        color = styles[_label(run)]["color"]
        ax.plot(steps, losses, color=color, linewidth=0.8, alpha=0.25)
        ax.plot(steps, _smooth(losses), color=color, linewidth=2.2, label=run["encoding"])
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (nats/token)")
    if values:
        tail = sorted(values)[: max(1, len(values) // 2)]
        ax.set_ylim(min(values) * 0.97, max(tail[-1] * 1.6, min(values) * 1.2))
    ax.set_title(f"Training curves at L = {results.get('config', {}).get('train_len')}"
                 " (same data, budget and seed; faint: every logged step, bold: moving "
                 "average)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def _entropy_panel(ax, runs: list[dict], styles: dict, train_len: int | None,
                   title: str) -> None:
    lengths, uniform = set(), {}
    for run in runs:
        pts = []
        for n, entry in (run.get("entropy") or {}).items():
            if isinstance(entry, dict) and entry.get("tail") is not None:
                pts.append((int(n), entry["tail"]))
                uniform[int(n)] = entry.get("uniform_tail")
        if pts:
            pts.sort()
            lengths.update(n for n, _ in pts)
            ax.plot(*zip(*pts), label=_label(run), **styles[_label(run)])
    if uniform:
        xs = sorted(uniform)
        ax.plot(xs, [uniform[n] for n in xs], color="black", linestyle=":", linewidth=1.5,
                label="uniform attention")
    if lengths:
        _length_axis(ax, sorted(lengths), train_len)
    if ax.get_subplotspec().is_first_col():
        ax.set_ylabel("entropy of the last quarter of queries (nats)")
    ax.set_title(title, fontsize=11)
    ax.legend(loc="upper left", fontsize=8.5, frameon=True, framealpha=0.85)


def plot_entropy_vs_length(results: dict, path: Path) -> Path | None:
    """Attention entropy against length, panels laid out as in :func:`plot_ppl_vs_length`."""
    runs = [r for r in results.get("runs", []) if r.get("entropy")]
    if not runs:
        return None
    styles = _styles(results.get("runs", []))
    train_len = results.get("config", {}).get("train_len")
    trained = [r for r in runs if not r.get("inference_scaling")]
    scaled = [r for r in runs if r.get("inference_scaling")]
    families = sorted({r["encoding"] for r in scaled})
    panels = 2 if scaled else 1
    fig, axes = plt.subplots(1, panels, figsize=(7.5 * panels, 5.5), dpi=110, squeeze=False,
                             sharey=True)
    _entropy_panel(axes[0, 0], trained, styles, train_len, "each encoding")
    if scaled:
        base = [r for r in trained if r["encoding"] in families]
        _entropy_panel(axes[0, 1], base + scaled, styles, train_len,
                       f"{', '.join(families)} + inference-time scaling")
    fig.suptitle("Attention entropy against length (higher = more diffuse attention)",
                 fontsize=13)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def plot_all(results: dict, out_dir: Path) -> list[Path]:
    """Every plot of a comparison into ``out_dir``; returns the paths written."""
    out_dir = Path(out_dir)
    paths = [plot_ppl_vs_length(results, out_dir / "ppl_vs_length.png"),
             plot_training_curves(results, out_dir / "training_curves.png"),
             plot_entropy_vs_length(results, out_dir / "entropy_vs_length.png")]
    return [p for p in paths if p is not None]
