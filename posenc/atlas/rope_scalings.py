"""RoPE frequency scalings seen per rotary dimension and as q.k against distance.

Every number comes from :func:`compute_inv_freq` (the registry the RoPE module applies) and
from the RoPE module itself (``transform_qk``). The setting is a Llama-2-like head: d = 128,
theta = 10,000, trained at L = 2048 and stretched by s = 4 to 8192 tokens.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

from ..encodings.context import HookContext
from ..encodings.registry import build_encoding
from ..encodings.rope_scaling import compute_inv_freq
from .figure import Panel, log2_axis, new_figure, save

HEAD_DIM = 128
THETA = 1e4
TRAIN_LEN = 2048
FACTOR = 4.0
#: the sequence length at which dynamic NTK's frequencies are drawn
DYNAMIC_LEN = int(FACTOR * TRAIN_LEN)

#: label -> scaling dict (None: plain RoPE); the order of the legends
SCALINGS: dict[str, dict | None] = {
    "linear PI": {"rope_type": "linear", "factor": FACTOR},
    "NTK-aware": {"rope_type": "ntk", "factor": FACTOR},
    "YaRN": {"rope_type": "yarn", "factor": FACTOR,
             "original_max_position_embeddings": TRAIN_LEN},
    "Llama 3": {"rope_type": "llama3", "factor": FACTOR,
                "original_max_position_embeddings": TRAIN_LEN, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0},
    "dynamic NTK": {"rope_type": "dynamic", "factor": FACTOR,
                    "original_max_position_embeddings": TRAIN_LEN},
}
COLORS = {"none": "black", "linear PI": "tab:blue", "NTK-aware": "tab:orange",
          "YaRN": "tab:green", "Llama 3": "tab:red", "dynamic NTK": "tab:purple"}
_CITES = "linear PI (Chen et al., 2023), NTK-aware (bloc97, 2023), YaRN (Peng et al., 2023), " \
         "Llama 3 (Meta, 2024) and dynamic NTK (emozilla, 2023)"


def wavelengths(inv_freq: Tensor) -> Tensor:
    """Tokens per full turn of each rotary pair: 2 pi / inv_freq, (d/2,)."""
    return 2 * math.pi / inv_freq.to(torch.float64)


def scaled_frequencies(seq_len: int = DYNAMIC_LEN) -> dict[str, Tensor]:
    """inv_freq (d/2,) of plain RoPE ("none") and of every scaling in :data:`SCALINGS`
    (dynamic NTK at ``seq_len`` tokens)."""
    out = {"none": compute_inv_freq(HEAD_DIM, THETA)[0]}
    for label, scaling in SCALINGS.items():
        out[label] = compute_inv_freq(HEAD_DIM, THETA, scaling, seq_len=seq_len)[0]
    return out


def rope_scaling_wavelengths_panel(out_dir: Path) -> Panel:
    freqs = scaled_frequencies()
    base = freqs["none"]
    ratio = {label: freqs[label] / base for label in SCALINGS}
    index = torch.arange(HEAD_DIM // 2)
    fig, axes = new_figure(13, 4.8, 1, 2)
    left, right = axes[0]
    waves = wavelengths(base)
    left.plot(index, waves, color="black", marker="o", markersize=3, linewidth=1.2,
              label="wavelength 2 pi / theta_i")
    left.axhline(TRAIN_LEN, color="tab:red", linestyle="--", linewidth=1.2,
                 label=f"training length L = {TRAIN_LEN}")
    left.axhline(DYNAMIC_LEN, color="tab:purple", linestyle=":", linewidth=1.4,
                 label=f"target length sL = {DYNAMIC_LEN}")
    first_long = int((waves > TRAIN_LEN).nonzero()[0])
    left.axvspan(first_long - 0.5, HEAD_DIM // 2 - 0.5, color="tab:red", alpha=0.08,
                 label="no full turn inside L")
    log2_axis(left, "y", 4, 2 ** 16)
    left.set_ylabel("wavelength (tokens per turn)")
    left.set_title(f"Plain RoPE: d = {HEAD_DIM}, theta = {THETA:,.0f}")
    left.legend(fontsize=9, loc="upper left")
    for label, values in ratio.items():
        extra = f" at {DYNAMIC_LEN} tokens" if label == "dynamic NTK" else ""
        right.plot(index, values, color=COLORS[label], linewidth=1.8, label=label + extra,
                   marker="o" if label == "YaRN" else None, markersize=3)
    lowest = min(float(v.min()) for v in ratio.values())
    log2_axis(right, "y", 2 ** math.floor(math.log2(lowest)), 1.5, labels={1 / 4: "1/4 = 1/s"})
    right.set_ylabel("frequency ratio scaled / original")
    right.set_title(f"Scalings to s = {FACTOR:g} x L: 1 = extrapolated, 1/s = interpolated")
    right.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
    for ax in (left, right):
        ax.set_xlabel("rotary pair i (frequency theta^(-2i/d), fastest first)")
        ax.set_xlim(-1, HEAD_DIM // 2)
        ax.grid(True, alpha=0.3)
    images = [save(fig, out_dir, "rope_scaling_wavelengths.png")]
    caption = (
        f"Each rotary pair of a {HEAD_DIM}-dimensional RoPE head turns with its own "
        f"wavelength, from about 6 tokens to tens of thousands, and the pairs right of "
        f"the shaded edge never complete a turn inside the training length L = {TRAIN_LEN}, "
        f"so past L they meet angles they were never trained on. The ratio of scaled to "
        f"original frequency shows what each scaling ({_CITES}) does about it: linear PI "
        f"divides every frequency by s, which squeezes the fast pairs too, while YaRN and "
        f"Llama 3 keep the fast pairs unchanged (ratio 1, extrapolated) and divide only the "
        f"slow ones by s (interpolated), and the NTK variants change the base so the ratio "
        f"falls smoothly.")
    data = {"head_dim": HEAD_DIM, "theta": THETA, "train_len": TRAIN_LEN, "factor": FACTOR,
            "dynamic_seq_len": DYNAMIC_LEN, "pair_index": index, "inv_freq": freqs,
            "wavelength": {label: wavelengths(f) for label, f in freqs.items()},
            "frequency_ratio": ratio, "scalings": SCALINGS}
    return Panel("rope_scaling_wavelengths", "RoPE scalings: which dimensions are "
                 "interpolated", caption, images, data)


def identical_pair_scores(scaling: dict | None, distances: Tensor, seed: int = 0) -> Tensor:
    """q.k for one fixed random q and k = q, the query ``r`` tokens after the key, through
    the library's RoPE module with ``scaling``; each distance is its own sequence of r + 1
    tokens (so dynamic NTK uses the frequencies of that length). -> (N,), 1 at r = 0 without
    an attention factor."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, 1, HEAD_DIM, generator=gen)
    q = q / q.norm()
    pe = build_encoding("rope", n_heads=1, head_dim=HEAD_DIM, max_len=TRAIN_LEN, theta=THETA,
                        scaling=scaling)
    key_pos = torch.zeros(1, dtype=torch.long)
    if not pe.length_dependent:                  # one batched call: the same frequencies
        n = distances.numel()
        q_rot, k_rot = pe.transform_qk(q.expand(1, 1, n, HEAD_DIM).contiguous(), q,
                                       HookContext.for_positions(distances, key_pos))
        return (q_rot * k_rot).sum(-1)[0, 0]
    out = []
    for r in distances.tolist():
        q_rot, k_rot = pe.transform_qk(q, q, HookContext.for_positions(torch.tensor([r]), key_pos))
        out.append(float((q_rot * k_rot).sum()))
    return torch.tensor(out)


def rope_scaling_scores_panel(out_dir: Path) -> Panel:
    top = 16 * TRAIN_LEN
    logs = torch.linspace(0, math.log2(top), 900)
    distances = torch.unique(torch.round(2.0 ** logs).long())
    plain = identical_pair_scores(None, distances)
    scores = {label: identical_pair_scores(s, distances) for label, s in SCALINGS.items()}
    fig, axes = new_figure(13, 7.2, 2, 3, sharey=True)
    panels = [("none", plain)] + list(scores.items())
    for ax, (label, values) in zip(axes.flat, panels):
        if label != "none":
            ax.plot(distances, plain, color="lightgrey", linewidth=1.0, label="plain RoPE")
        ax.plot(distances, values, color=COLORS[label], linewidth=1.1,
                label="plain RoPE" if label == "none" else label)
        ax.axvline(TRAIN_LEN, color="tab:red", linestyle="--", linewidth=1)
        ax.axvline(DYNAMIC_LEN, color="tab:purple", linestyle=":", linewidth=1.3)
        log2_axis(ax, "x", 1, top)
        for x, text, color in ((TRAIN_LEN, "L", "tab:red"), (DYNAMIC_LEN, "sL", "tab:purple")):
            ax.text(x * 1.1, 1.27, text, color=color, fontsize=9, va="top")
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_title("plain RoPE (no scaling)" if label == "none" else label)
        ax.set_xlabel("query - key distance r (tokens; L = 2048, sL = 8192)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    for row in axes:
        row[0].set_ylabel("q.k (k = q, |q| = 1)")
    axes[0, 0].set_ylim(-0.4, 1.35)
    images = [save(fig, out_dir, "rope_scaling_scores.png")]
    caption = (
        "The score of a query with an identical key r tokens earlier (1 at distance 0) "
        "oscillates and shrinks with r, and plain RoPE (grey in every plot) meets patterns "
        "past the training length L that it never saw in training. Each scaling stretches the "
        "curve so the part seen up to L covers the range up to sL (linear PI exactly by s, "
        "YaRN and Llama 3 only in their slow dimensions, dynamic NTK only once a sequence is "
        "longer than L), and YaRN also multiplies the scores by its attention factor, which "
        "is why its curve starts above 1.")
    data = {"head_dim": HEAD_DIM, "theta": THETA, "train_len": TRAIN_LEN, "factor": FACTOR,
            "distances": distances, "qk": {"none": plain, **scores}}
    return Panel("rope_scaling_scores", "RoPE scalings: q.k across and beyond the training "
                 "length", caption, images, data)
