"""Absolute encodings: the sinusoidal table, and the position vectors of six absolute
encodings projected to 2-D, inside and past the training length.

Position vectors come from each encoding's own ``embed`` hook, built with
:func:`build_encoding` at initialisation (seed 0) or taken from a trained model.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..encodings.base import PositionalEncoding
from ..encodings.registry import build_encoding
from ..encodings.sinusoidal import sinusoidal_table
from .figure import Panel, colormap, dress, new_figure, save

TABLE_POSITIONS = 256
TABLE_DIM = 128
#: training length and width of the trajectories panel
TRAJ_LEN = 64
TRAJ_HEADS, TRAJ_HEAD_DIM = 4, 16
TRAJECTORY_ENCODINGS = {
    "learned": {}, "sinusoidal": {}, "recurrent": {}, "floater": {},
    "complex_order": {"vocab_size": 8}, "hierarchical": {},
}


#: the caption of :func:`sinusoidal_panel` (two sentences, the sources cited)
SINUSOIDAL_CAPTION = (
    "The sinusoidal table of Vaswani et al. (2017) gives each pair of dimensions a sine "
    "and cosine of the position at a wavelength that grows geometrically from 2 pi to "
    "about 10,000 x 2 pi tokens, so the left columns change every token and the right "
    "ones barely at all. Because shifting the position rotates every pair, the dot "
    "product of two position vectors depends only on their offset (the two curves on "
    "the right coincide) and is largest at offset 0, but it is symmetric and not "
    "monotone, so it tells a model how far apart two tokens are but not which comes "
    "first.")


def sinusoidal_panel(out_dir: Path) -> Panel:
    table = sinusoidal_table(TABLE_POSITIONS, TABLE_DIM)               # (P, D)
    far = 4 * TABLE_POSITIONS
    vectors = sinusoidal_table(2 * far + 1, TABLE_DIM)
    centre = far
    distance = torch.arange(-far, far + 1)
    dots = vectors @ vectors[centre]                                    # (2 far + 1,)
    other = sinusoidal_table(far + 1, TABLE_DIM) @ sinusoidal_table(1, TABLE_DIM)[0]
    fig, axes = new_figure(13, 4.6, 1, 2, width_ratios=(1, 1.25))
    left, right = axes[0]
    image = left.imshow(table.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                        interpolation="nearest")
    fig.colorbar(image, ax=left, label="PE[p, i]")
    left.set_xlabel("dimension i (even: sin, odd: cos; slower to the right)")
    left.set_ylabel("position p (tokens)")
    left.set_title(f"Sinusoidal table, d = {TABLE_DIM}")
    right.plot(distance, dots, color="tab:blue", linewidth=1.2,
               label=f"PE[{centre}] . PE[{centre} + k]")
    right.plot(torch.arange(far + 1), other, color="tab:orange", linewidth=1.0,
               linestyle="--", label="PE[0] . PE[k]: the same curve")
    right.axhline(0, color="black", linewidth=0.5)
    right.set_xlim(-far, far)
    dress(right, "offset k between the two positions (tokens)", "dot product",
          "Dot product of two position vectors", legend="upper left")
    images = [save(fig, out_dir, "sinusoidal.png")]
    caption = SINUSOIDAL_CAPTION
    data = {"table": table, "dim": TABLE_DIM, "offset": distance, "dot_from_centre": dots,
            "dot_from_zero": other, "centre": centre}
    return Panel("sinusoidal", "Sinusoidal: the table and its dot products", caption, images,
                 data)


def position_vectors(pe: PositionalEncoding, n: int, width: int) -> Tensor:
    """The vector the encoding adds (or, for word-dependent encodings, the embedding of one
    fixed word) at positions 0..n-1 through its ``embed`` hook: (n, width). Encodings that
    modify the token vector (complex-order) get the all-ones word with id 0."""
    pos = torch.arange(n)
    ids = torch.zeros(1, n, dtype=torch.long)
    with torch.no_grad():
        zero = torch.zeros(1, n, width)
        added = pe.embed(zero, pos, ids=ids)[0]
        if added.abs().max() == 0:                            # multiplies the word instead
            added = pe.embed(torch.ones(1, n, width), pos, ids=ids)[0]
    return added.float()


def pca_2d(vectors: Tensor, fit_rows: int) -> tuple[Tensor, Tensor]:
    """Project (n, C) onto the top two principal axes of its first ``fit_rows`` rows:
    the (n, 2) coordinates and the explained fraction of those two axes (2,)."""
    fit = vectors[:fit_rows].double()
    mean = fit.mean(dim=0)
    _, s, v = torch.linalg.svd(fit - mean, full_matrices=False)
    explained = (s ** 2) / (s ** 2).sum().clamp(min=1e-30)
    return ((vectors.double() - mean) @ v[:2].T).float(), explained[:2].float()


def trajectories(encodings: dict[str, PositionalEncoding], train_len: int, width: int
                 ) -> dict[str, dict]:
    """PCA trajectories of every encoding over 0..4L-1 (fit on 0..L-1); encodings whose
    positions stop at their table (learned) are drawn up to it."""
    out = {}
    for name, pe in encodings.items():
        limit = pe.position_limit
        n = 4 * train_len if limit is None else min(4 * train_len, limit.positions)
        coords, explained = pca_2d(position_vectors(pe, n, width), train_len)
        out[name] = {"positions": n, "coords": coords, "explained": explained}
    return out


def draw_trajectories(fig, axes, found: dict[str, dict], train_len: int) -> None:
    """One scatter per encoding: positions < L coloured by position, later ones grey."""
    cmap = colormap("viridis")
    for ax, (name, item) in zip(axes.flat, found.items()):
        xy = item["coords"]
        n = item["positions"]
        inside = min(n, train_len)
        ax.plot(xy[:, 0], xy[:, 1], color="lightgrey", linewidth=0.6, zorder=1)
        if n > train_len:
            ax.scatter(xy[train_len:, 0], xy[train_len:, 1], s=9, marker="x",
                       color="tab:red", linewidths=0.8, zorder=2,
                       label=f"past L: {train_len}..{n - 1}")
        points = ax.scatter(xy[:inside, 0], xy[:inside, 1], c=torch.arange(inside), s=12,
                            cmap=cmap, vmin=0, vmax=train_len - 1, zorder=3,
                            label=f"inside L: 0..{inside - 1}")
        ex = item["explained"]
        note = "" if n > train_len else " (undefined past its table)"
        ax.set_title(f"{name}{note}", fontsize=10)
        ax.set_xlabel(f"PC 1 ({100 * float(ex[0]):.0f} % of variance inside L)")
        ax.set_ylabel(f"PC 2 ({100 * float(ex[1]):.0f} %)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.colorbar(points, ax=axes, label="position inside the training length", shrink=0.8)


def absolute_trajectories_panel(out_dir: Path) -> Panel:
    torch.manual_seed(0)
    width = TRAJ_HEADS * TRAJ_HEAD_DIM
    encodings = {name: build_encoding(name, n_heads=TRAJ_HEADS, head_dim=TRAJ_HEAD_DIM,
                                      max_len=TRAJ_LEN, **options)
                 for name, options in TRAJECTORY_ENCODINGS.items()}
    with torch.no_grad():        # a smooth table in place of a trained one (see the caption)
        encodings["hierarchical"].table.copy_(sinusoidal_table(TRAJ_LEN, width))
    found = trajectories(encodings, TRAJ_LEN, width)
    found["hierarchical (on a sinusoidal 64-row table)"] = found.pop("hierarchical")
    fig, axes = new_figure(14, 8.4, 2, 3)
    draw_trajectories(fig, axes, found, TRAJ_LEN)
    images = [save(fig, out_dir, "absolute_trajectories.png")]
    caption = (
        f"Each absolute encoding's position vectors (width {width}, at initialisation, seed "
        f"0) are projected onto the two main directions of positions 0..{TRAJ_LEN - 1}, the "
        f"training length L here, with positions L..4L-1 as red crosses: the learned table "
        f"(GPT-2, BERT) is random noise before training and has no vector past L at all, "
        f"sinusoidal (Vaswani et al., 2017) and complex-order (Wang et al., 2020; one word "
        f"shown) leave the path traced inside L and wander through its middle, the recurrent "
        f"trajectory bunches up as it settles, and FLOATER's ODE (Liu et al., 2020) keeps "
        f"drifting far beyond the region seen in training. The hierarchical decomposition "
        f"(Su, 2020) is drawn on a smooth 64-row table (the sinusoidal one, standing in for "
        f"a trained table, since a fresh one is noise) so its structure shows: each block "
        f"of L positions past the first repeats the trained path, shifted by a block vector; "
        f"`posenc atlas --run` draws a trained model's own vectors.")
    data = {"train_len": TRAJ_LEN, "width": width, "trajectories": found}
    return Panel("absolute_trajectories", "Absolute encodings: position vectors in 2-D",
                 caption, images, data)
