"""Which rotary pairs read which position: M-RoPE's three axes for text and an image (Wang
et al. 2024, Qwen2-VL, Sec. 2.1), and the frequencies p-RoPE keeps (Barbero et al. 2024)."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

from ..encodings.mrope import default_sections
from ..encodings.registry import build_encoding
from .figure import Panel, colormap, new_figure, save

HEAD_DIM = 64
#: the M-RoPE sequence: (kind, text tokens or (rows, columns) of an image's patches)
SEQUENCE = (("text", 3), ("image", (3, 4)), ("text", 3))
AXES = ("temporal", "height", "width")
AXIS_COLOURS = ("#4c72b0", "#55a868", "#c44e52")
PARTIALS = (1.0, 0.75, 0.5)


def multimodal_positions(sequence=SEQUENCE) -> tuple[Tensor, list[str]]:
    """Qwen2-VL's positions (transformers' ``get_rope_index``) of ``sequence``: a text token
    has one value on all three axes; an image's patch at (row r, column c) of one frame has
    (s, s + r, s + c) with s the next position; the next token starts after the largest
    position so far. Returns positions (3, N) long and each token's kind ("text"/"image")."""
    columns, kinds, start = [], [], 0
    for kind, size in sequence:
        if kind == "text":
            for i in range(size):
                columns.append([start + i] * 3)
            start += size
            kinds += ["text"] * size
        else:
            rows, cols = size
            columns += [[start, start + r, start + c] for r in range(rows) for c in range(cols)]
            start += max(rows, cols)
            kinds += ["image"] * (rows * cols)
    return torch.tensor(columns).T.contiguous(), kinds


def mrope_panel(out_dir: Path) -> Panel:
    positions, kinds = multimodal_positions()
    pairs = HEAD_DIM // 2
    sections = default_sections(pairs)
    pe = build_encoding("mrope", n_heads=1, head_dim=HEAD_DIM)
    assert list(pe.mrope_section) == sections
    n = positions.shape[1]
    fig = new_figure(12, 5.6, 0)[0]
    grid = fig.add_gridspec(2, 1, height_ratios=[3, 1])
    top, bottom = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    top.imshow(positions.numpy(), cmap=colormap("Blues"), aspect="auto",
               vmin=-2, vmax=int(positions.max()) + 2)
    for a in range(3):
        for j in range(n):
            top.text(j, a, str(int(positions[a, j])), ha="center", va="center", fontsize=9)
    top.set_yticks(range(3), [f"{axis} position" for axis in AXES])
    labels = [("patch\n" + f"r{(j - 3) // 4} c{(j - 3) % 4}") if kind == "image" else "text"
              for j, kind in enumerate(kinds)]
    top.set_xticks(range(n), labels, fontsize=7.5)
    image_span = [j for j, kind in enumerate(kinds) if kind == "image"]
    top.axvspan(image_span[0] - 0.5, image_span[-1] + 0.5, color="orange", alpha=0.15)
    top.set_title("3 text tokens, an image of 3 x 4 patches (one frame), 3 text tokens: "
                  "each token's three positions", fontsize=10)
    bottom.set_title(f"which axis rotates each of the {pairs} rotary pairs (head_dim "
                     f"{HEAD_DIM}, mrope_section {sections}; pair 0 has the highest "
                     f"frequency)", fontsize=10)
    start = 0
    for axis, size, colour in zip(AXES, sections, AXIS_COLOURS):
        bottom.barh(0, size, left=start, color=colour, edgecolor="white")
        bottom.text(start + size / 2, 0, f"{axis}: pairs {start}-{start + size - 1}",
                    ha="center", va="center", color="white", fontsize=10)
        start += size
    bottom.set_xlim(0, pairs)
    bottom.set_yticks([])
    bottom.set_xlabel("rotary pair i (frequency theta^(-2i/d))")
    images = [save(fig, out_dir, "mrope_grid.png")]
    caption = (
        "M-RoPE (Wang et al. 2024, Qwen2-VL, Section 2.1) gives each token a temporal, a height "
        "and a width position: text tokens carry one value on all three axes (so text alone "
        "is RoPE), an image's patches share the temporal position and count rows and columns, "
        "and the next text resumes after the largest position. The rotary pairs are split "
        "into three sections (Qwen2-VL's 1/4, 3/8, 3/8), each rotated by its own axis "
        "(`pe=\"mrope\"`, positions of shape (3, B, T)).")
    data = {"kinds": kinds, "positions": positions, "axes": list(AXES), "head_dim": HEAD_DIM,
            "mrope_section": sections}
    return Panel("mrope_grid", "M-RoPE: three position axes for text and images", caption,
                 images, data)


def kept_frequencies(partial: float, head_dim: int = HEAD_DIM, theta: float = 10_000.0
                     ) -> Tensor:
    """The inverse frequencies (R/2,) fp32 of RoPE with ``partial`` (p-RoPE): RoPE's own for
    the kept pairs, 0 (never rotated) for the dropped lowest ones."""
    pe = build_encoding("rope", n_heads=1, head_dim=head_dim, theta=theta, partial=partial)
    return pe._inv_freq()[0]


def p_rope_panel(out_dir: Path) -> Panel:
    freqs = {f"{p:g}": kept_frequencies(p) for p in PARTIALS}
    pairs = HEAD_DIM // 2
    fig, axes = new_figure(12, 4.4, 1, 1)
    ax = axes[0][0]
    full = freqs["1"]
    wavelengths = 2 * math.pi / full
    cmap = colormap("viridis")
    span = math.log(float(wavelengths[-1]) / float(wavelengths[0]))
    for row, (p, inv_freq) in enumerate(freqs.items()):
        kept = inv_freq > 0
        for i in range(pairs):
            if kept[i]:
                shade = cmap(math.log(float(wavelengths[i] / wavelengths[0])) / span)
                ax.scatter(i, row, s=150, color=shade, edgecolor="black", linewidth=0.5)
            else:
                ax.scatter(i, row, s=150, facecolor="white", edgecolor="grey", marker="X")
        ax.text(pairs - 0.3, row, f"  keeps {int(kept.sum())} of {pairs}", va="center",
                fontsize=9)
    ax.set_yticks(range(len(freqs)), [f"partial = {p}" for p in freqs])
    ax.set_ylim(len(freqs) - 0.5, -0.7)
    ticks = list(range(0, pairs, 4)) + [pairs - 1]
    ax.set_xticks(ticks, [f"{i}\n{float(wavelengths[i]):,.0f}" for i in ticks], fontsize=8)
    ax.set_xlim(-1, pairs + 4)
    ax.set_xlabel(f"rotary pair i (head_dim {HEAD_DIM}, theta 10k) over its wavelength in "
                  f"tokens; dot: rotated at RoPE's own frequency, X: never rotated")
    ax.set_title("p-RoPE keeps the highest frequencies and stops rotating the lowest ones",
                 fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    images = [save(fig, out_dir, "p_rope.png")]
    caption = (
        "p-RoPE (Barbero et al. 2024, \"Round and Round We Go!\", ICLR 2025) keeps the "
        "floor(p d/2) highest of RoPE's frequencies unchanged and sets the lowest ones to "
        "zero, so those pairs carry content without rotating; the authors report lower "
        "perplexity than full RoPE (their Table 2). It is the option "
        "`pe_options={\"partial\": p}` of `rope` (and `mrope`), unlike `rotary_dim`, which "
        "recomputes the frequencies over fewer dimensions.")
    data = {"head_dim": HEAD_DIM, "theta": 10_000.0,
            "inv_freq": freqs, "kept_pairs": {p: int((f > 0).sum()) for p, f in freqs.items()},
            "wavelength_tokens": wavelengths}
    return Panel("p_rope", "p-RoPE: the rotary frequencies kept", caption, images, data)
