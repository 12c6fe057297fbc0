"""Stick-breaking attention's weights beside a softmax's, from the same logits.

Tan, Shen, Yang, Courville and Panda (2025, ICLR), Figure 1: stick-breaking gives most of
its weight to the most recent high logit, where a softmax gives equal logits equal weights;
with no positional encoding the order of the keys enters through the stick alone.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..attention.masks import causal_visible
from ..attention.stick_breaking import stick_breaking_weights
from .figure import Panel, dress, new_figure, save

#: the query row: keys 0..ROW_LEN-1 before the query, two of them with the same high logit
ROW_LEN = 16
PEAKS, PEAK_LOGIT, LOW_LOGIT = (3, 11), 4.0, -2.0
#: the maps: positions 0..MAP_LEN-1, logits from a fixed seed
MAP_LEN, MAP_SEED, MAP_STD = 24, 0, 2.0


def row_weights() -> dict[str, torch.Tensor]:
    """One query (position ROW_LEN) over ROW_LEN earlier keys: the logits, the softmax's
    weights and stick-breaking's (float64)."""
    logits = torch.full((ROW_LEN + 1,), LOW_LOGIT, dtype=torch.float64)
    logits[list(PEAKS)] = PEAK_LOGIT
    visible = torch.ones(1, ROW_LEN + 1, dtype=torch.bool)
    stick, _ = stick_breaking_weights(logits[None], visible)
    return {"logits": logits[:ROW_LEN], "softmax": logits[:ROW_LEN].softmax(-1),
            "stick_breaking": stick[0, :ROW_LEN]}


def map_weights() -> dict[str, torch.Tensor]:
    """(MAP_LEN, MAP_LEN) causal weights of both from the same random logits (float64)."""
    g = torch.Generator().manual_seed(MAP_SEED)
    logits = torch.randn(MAP_LEN, MAP_LEN, generator=g, dtype=torch.float64) * MAP_STD
    visible = causal_visible(MAP_LEN, MAP_LEN, "cpu")
    softmax = logits.masked_fill(~visible, float("-inf")).softmax(-1)
    stick, rem = stick_breaking_weights(logits, visible)
    return {"logits": logits, "softmax": softmax, "stick_breaking": stick, "remainder": rem}


def stick_breaking_panel(out_dir: Path) -> Panel:
    row, maps = row_weights(), map_weights()
    fig, axes = new_figure(15, 4.6, 1, 3)
    ax = axes[0][0]
    keys = torch.arange(ROW_LEN).numpy()
    ax.bar(keys - 0.2, row["softmax"].numpy(), width=0.4, label="softmax", color="#4c72b0")
    ax.bar(keys + 0.2, row["stick_breaking"].numpy(), width=0.4, label="stick-breaking",
           color="#c44e52")
    dress(ax, f"key position (the query is at {ROW_LEN})", "attention weight",
          f"Equal logits {PEAK_LOGIT:g} at keys {PEAKS[0]} and {PEAKS[1]}, the rest "
          f"{LOW_LOGIT:g}", legend="upper left")
    ax.title.set_fontsize(10)
    top = float(max(maps["softmax"].max(), maps["stick_breaking"].max()))
    for ax, name, title in ((axes[0][1], "softmax", "softmax"),
                            (axes[0][2], "stick_breaking", "stick-breaking (key j < query)")):
        image = ax.imshow(maps[name].numpy(), cmap="viridis", vmin=0, vmax=top,
                          aspect="equal")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        ax.set_title(f"{title}: the same random logits (std {MAP_STD:g})", fontsize=10)
    fig.colorbar(image, ax=axes[0][2], shrink=0.8, label="weight")
    images = [save(fig, out_dir, "stick_breaking.png")]
    caption = (
        "Stick-breaking attention (Tan et al. 2025, ICLR, Figure 1 and section 2) lets each "
        "key, from the nearest back, take the share sigmoid(q.k/sqrt(d)) of what is left of "
        "a stick, so the most recent high logit takes most of the weight where a softmax "
        "splits it equally between equal logits; with no positional encoding this recency is "
        "the only order the model sees. Rows sum to at most 1 (the rest goes to the query's "
        "own value, as in the authors' code), which shows in the right-hand map as rows "
        "lighter than the softmax's (`LMConfig(attn_form=\"stick_breaking\")`).")
    data = {"row": {"peaks": list(PEAKS), **row},
            "maps": {"length": MAP_LEN, "seed": MAP_SEED, **maps}}
    return Panel("stick_breaking", "Stick-breaking attention against a softmax", caption,
                 images, data)
