"""Additive distance biases: ALiBi's slopes and matrices, T5's buckets, and every bias
encoding's bias against distance at initialisation (ALiBi, T5, KERPLE, FIRE, xPos's decay).

Numbers come from the library: :func:`alibi_slopes`, :func:`relative_position_bucket`, and
encodings built with :func:`build_encoding` (their ``distance_bias`` / ``score_bias`` hooks).
"""

from __future__ import annotations

from pathlib import Path

import torch
from matplotlib.ticker import NullLocator
from torch import Tensor

from ..encodings.alibi import alibi_slopes
from ..encodings.base import PositionalEncoding
from ..encodings.context import HookContext
from ..encodings.registry import build_encoding
from ..encodings.relative_bias import DistanceBiasEncoding
from ..encodings.t5 import relative_position_bucket
from ..encodings.xpos import xpos_zeta
from .figure import Panel, colormap, log2_axis, new_figure, save

ALIBI_HEADS = (8, 12)
ALIBI_SIZE = 24
BIAS_HEADS = 8
BIAS_HEAD_DIM = 64
#: distances drawn for the bias curves: 0 .. MAX_DISTANCE - 1
MAX_DISTANCE = 1024


def alibi_panel(out_dir: Path) -> Panel:
    slopes = {str(n): alibi_slopes(n) for n in ALIBI_HEADS}
    shown_heads = (0, 3, 7)
    pe = build_encoding("alibi", n_heads=ALIBI_HEADS[0], head_dim=BIAS_HEAD_DIM)
    pos = torch.arange(ALIBI_SIZE)
    at = HookContext.for_positions(pos, pos, causal=True)
    bias = pe.score_bias(None, None, at)[0]                              # (H, n, n)
    hidden = pos[None, :] > pos[:, None]
    matrices = bias[list(shown_heads)].masked_fill(hidden, float("nan"))
    fig, _ = new_figure(14, 4.2, 0)
    grid = fig.add_gridspec(1, 4, width_ratios=(1.5, 1, 1, 1))
    ax = fig.add_subplot(grid[0])
    styles = ({"marker": "o", "markersize": 11, "markerfacecolor": "none", "linewidth": 2.5,
               "alpha": 0.6}, {"marker": "s", "markersize": 5, "linestyle": "--",
                               "linewidth": 1.2})
    for n, style in zip(ALIBI_HEADS, styles):
        ax.plot(torch.arange(1, n + 1), slopes[str(n)], **style,
                label=f"{n} heads" + (" (power of two)" if n & (n - 1) == 0 else
                                      " (not a power of two)"))
    log2_axis(ax, "y", 2 ** -10, 1)
    ax.set_xlabel("head h")
    ax.set_xticks(range(1, max(ALIBI_HEADS) + 1))
    ax.set_ylabel("slope m_h (log scale)")
    ax.set_title("ALiBi slopes")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="lower left")
    low = float(matrices.nan_to_num(0).min())
    image = None
    for j, h in enumerate(shown_heads):
        axm = fig.add_subplot(grid[j + 1])
        image = axm.imshow(matrices[j].numpy(), cmap="magma", vmin=low, vmax=0, origin="upper")
        axm.set_title(f"head {h + 1} of 8: m = {float(slopes['8'][h]):.4g}")
        axm.set_xlabel("key position j")
        axm.set_ylabel("query position i")
    fig.colorbar(image, ax=fig.axes[1:], label="bias -m (i - j) added to the logit",
                 shrink=0.9)
    images = [save(fig, out_dir, "alibi.png")]
    caption = (
        "ALiBi (Press et al., 2022) adds -m (i - j) to the logit of a query at i for a key at "
        "j, with slopes m that halve from head to head in a geometric sequence; for a head "
        "count that is not a power of two the slopes of the next smaller power of two are "
        "taken and the rest are every other slope of twice that count, which is why the "
        "12-head curve jumps back up at head 9. A steep head (left matrix) looks only at the "
        "last few tokens while "
        "a shallow one sees far back, and since the bias only grows with distance it is "
        "defined at any length.")
    data = {"slopes": slopes, "matrix_heads": [h + 1 for h in shown_heads],
            "matrices": matrices, "positions": pos}
    return Panel("alibi", "ALiBi: slopes and bias matrices", caption, images, data)


def t5_buckets_panel(out_dir: Path) -> Panel:
    num_buckets, max_distance = 32, 128
    rel = torch.arange(-512, 513)
    decoder = relative_position_bucket(rel, bidirectional=False, num_buckets=num_buckets,
                                       max_distance=max_distance)
    encoder = relative_position_bucket(rel, bidirectional=True, num_buckets=num_buckets,
                                       max_distance=max_distance)
    fig, axes = new_figure(13, 4.4, 1, 2)
    cases = (("decoder (unidirectional)", decoder, num_buckets // 2),
             ("encoder (bidirectional)", encoder, num_buckets // 4))
    for ax, (title, buckets, max_exact) in zip(axes[0], cases):
        ax.step(rel, buckets, where="mid", color="tab:blue", linewidth=1.5, label="bucket")
        for sign in (-1, 1) if "bi" in title else (-1,):
            ax.axvline(sign * max_exact, color="tab:green", linestyle="--", linewidth=1.2,
                       label="exact | log boundary" if sign == -1 else None)
            ax.axvline(sign * max_distance, color="tab:red", linestyle=":", linewidth=1.4,
                       label="max_distance (farther: last bucket)" if sign == -1 else None)
        ax.set_title(f"T5 {title}: {num_buckets} buckets, max distance {max_distance}")
        ax.set_xscale("symlog", linthresh=max_exact, linscale=1.5)
        ticks = [0] + [s * 2 ** e for e in range(2, 10) for s in (-1, 1)]
        ax.set_xticks(sorted(ticks))
        ax.set_xticklabels([str(t) for t in sorted(ticks)], fontsize=8, rotation=90)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(f"relative position key - query (tokens; linear within +-{max_exact}, "
                      f"log beyond)")
        ax.set_ylabel("bucket index")
        ax.set_xlim(-512, 512)
        ax.set_yticks(range(0, num_buckets + 1, 4))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=9, loc="upper left" if "bi" in title else "upper right")
    images = [save(fig, out_dir, "t5_buckets.png")]
    caption = (
        "T5 (Raffel et al., 2020) learns one scalar per head and bucket rather than per "
        "distance: small distances get a bucket each (up to the green line), larger ones "
        "share buckets whose width grows logarithmically, and everything past max_distance "
        "= 128 falls in the last bucket, so the bias is defined at any length. A decoder "
        "spends all 32 buckets on keys before the query (keys after it land in bucket 0 and "
        "are masked), an encoder splits them between the two sides.")
    data = {"relative_position": rel, "decoder": decoder, "encoder": encoder,
            "num_buckets": num_buckets, "max_distance": max_distance,
            "max_exact": {"decoder": num_buckets // 2, "encoder": num_buckets // 4}}
    return Panel("t5_buckets", "T5: relative position buckets", caption, images, data)


def bias_against_distance(pe: PositionalEncoding, n: int = MAX_DISTANCE) -> Tensor:
    """The bias a causal query adds for a key ``d`` tokens back, d = 0..n-1: (H, n).

    Distance-only biases use ``distance_bias(-d)``; others (FIRE, which also depends on the
    query position) are read from ``score_bias`` for a query at position n - 1."""
    distance = torch.arange(n)
    with torch.no_grad():
        if isinstance(pe, DistanceBiasEncoding):
            return pe.distance_bias(-distance).float()
        q_pos = torch.tensor([n - 1])
        k_pos = (n - 1) - distance
        at = HookContext.for_positions(q_pos, k_pos, causal=True)
        return pe.score_bias(None, None, at)[0, :, 0].float()


#: panel label -> (encoding, options) of the bias curves at initialisation
INIT_BIASES = {
    "ALiBi (fixed)": ("alibi", {}),
    "T5 (learned; init N(0, 0.02))": ("t5", {}),
    "KERPLE log: -r1 log(1 + r2 d)": ("kerple", {"variant": "log"}),
    "KERPLE power: -r1 d^r2": ("kerple", {"variant": "power"}),
    "FIRE (query at position 1023)": ("fire", {}),
}


def draw_head_curves(ax, distance: Tensor, curves: Tensor, cmap) -> None:
    """One line per head, coloured by head index. curves (H, N)."""
    heads = curves.shape[0]
    for h in range(heads):
        ax.plot(distance, curves[h], color=cmap(h / max(heads - 1, 1)), linewidth=1.3,
                label=f"head {h + 1}")


def distance_biases_panel(out_dir: Path) -> Panel:
    torch.manual_seed(0)
    distance = torch.arange(MAX_DISTANCE)
    curves = {}
    for label, (name, options) in INIT_BIASES.items():
        pe = build_encoding(name, n_heads=BIAS_HEADS, head_dim=BIAS_HEAD_DIM,
                            max_len=MAX_DISTANCE, **options)
        curves[label] = bias_against_distance(pe)
    xpos = build_encoding("xpos", n_heads=1, head_dim=BIAS_HEAD_DIM, max_len=MAX_DISTANCE)
    zeta = xpos_zeta(xpos.rotary_dim, xpos.gamma)
    pairs = (0, 8, 16, 31)
    decay = zeta[list(pairs), None] ** (distance[None, :] / xpos.scale_base)   # (P, N)
    fig, axes = new_figure(14, 7.6, 2, 3)
    cmap = colormap("viridis")
    for ax, (label, values) in zip(axes.flat, curves.items()):
        draw_head_curves(ax, distance, values, cmap)
        ax.set_title(label)
        ax.set_ylabel("bias added to the logit")
    ax = axes[1, 2]
    for j, i in enumerate(pairs):
        ax.plot(distance, decay[j], color=colormap("plasma")(j / len(pairs)), linewidth=1.6,
                label=f"pair {i}: zeta = {float(zeta[i]):.3f}")
    ax.set_yscale("log")
    ax.set_title(f"xPos: decay of each rotary pair (scale_base {xpos.scale_base:g})")
    ax.set_ylabel("multiplier zeta_i^(d / scale_base)")
    ax.legend(fontsize=8, loc="lower left")
    for ax in axes.flat:
        ax.set_xlabel("distance d = query - key (tokens)")
        ax.set_xlim(0, MAX_DISTANCE)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=BIAS_HEADS, fontsize=9)
    images = [save(fig, out_dir, "distance_biases.png")]
    caption = (
        "Every bias encoding adds a function of the distance to the logits: ALiBi "
        "(Press et al., 2022) a fixed straight line per head, KERPLE (Chi et al., 2022) a "
        "learned logarithmic or power curve, T5 (Raffel et al., 2020) a learned value per "
        "bucket that starts near zero, and FIRE (Li et al., 2023) a small learned network of "
        "the log distance normalised by the query position; xPos (Sun et al., 2022) instead "
        "multiplies each rotary pair's part of q.k by a factor that decays fastest for the "
        "fast pairs. These are the curves at initialisation (seed 0), before any training "
        "shapes them; `posenc atlas --run` adds the curves of a trained model.")
    data = {"distance": distance, "heads": BIAS_HEADS, "bias": curves,
            "xpos": {"pairs": list(pairs), "zeta": zeta[list(pairs)], "decay": decay,
                     "scale_base": xpos.scale_base}}
    return Panel("distance_biases", "Distance biases at initialisation", caption, images,
                 data)
