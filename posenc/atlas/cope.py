"""CoPE's gated positions on a real sentence (Golovneva et al. 2024, "Contextual Position
Encoding: Learning to Count What's Important", arXiv 2405.18719, Section 3).

A hand-set example, not trained weights: one CoPE head of width :data:`HEAD_DIM` whose query
and key vectors are chosen so that q_i . k_j / sqrt(D) is +:data:`GATE_LOGIT` when token j ends
a sentence (".") and -:data:`GATE_LOGIT` otherwise. The gates sigmoid(q . k) are then about 1
on sentence ends and 0 elsewhere, and the library's ``gated_positions`` (reverse running sums
of the gates) count the sentences between a key and its query. A second head with the same
logit on every token counts tokens, CoPE's degenerate case: the ordinary relative position.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch
from torch import Tensor

from ..encodings.registry import build_encoding
from .figure import Panel, colormap, new_figure, save

SENTENCE = "Alice met Bob. They talked for hours. Then Bob left. Alice stayed home."
HEAD_DIM = 4
#: the scaled logit of a gated token (+) and of an ignored one (-): sigmoid(8) = 0.99966
GATE_LOGIT = 8.0
#: CoPE's largest position + 1 (positions are clamped to max_pos - 1)
MAX_POS = 32


def words(text: str = SENTENCE) -> list[str]:
    """Words and punctuation marks as tokens."""
    return re.findall(r"\w+|[^\w\s]", text)


def hand_set_qk(gated: list[bool], logit: float = GATE_LOGIT, head_dim: int = HEAD_DIM
                ) -> tuple[Tensor, Tensor]:
    """Queries and keys (1, 1, T, D) with q_i . k_j / sqrt(D) = +logit where ``gated[j]``,
    -logit elsewhere, for every query i: q = (logit sqrt(D), 0, ...), k_j = (+-1, 0, ...)."""
    t = len(gated)
    q = torch.zeros(1, 1, t, head_dim)
    q[..., 0] = logit * math.sqrt(head_dim)
    k = torch.zeros(1, 1, t, head_dim)
    k[..., 0] = torch.tensor([1.0 if g else -1.0 for g in gated])
    return q, k


def counted_positions(gated: list[bool]) -> tuple[Tensor, Tensor]:
    """(gates (T, T), positions (T, T)) of a causal CoPE head with :func:`hand_set_qk`: the
    library's sigmoid gates and running sums p_ij, 0 above the diagonal (hidden keys)."""
    pe = build_encoding("cope", n_heads=1, head_dim=HEAD_DIM, max_pos=MAX_POS)
    q, k = hand_set_qk(gated)
    pos = pe.gated_positions(q, k, causal=True)[0, 0]
    t = len(gated)
    gates = torch.sigmoid((q @ k.transpose(-1, -2))[0, 0] * pe.sm_scale())
    below = torch.ones(t, t, dtype=torch.bool).tril()
    return gates.masked_fill(~below, 0.0), pos.masked_fill(~below, 0.0)


#: the caption of :func:`cope_panel` (two sentences, the sources cited)
COPE_CAPTION = (
    "CoPE (Golovneva et al. 2024, Section 3) counts positions by content: query i gates "
    "each key with sigmoid(q_i·k_j) and the position of key j is the sum of the gates "
    "from j to i, so a head that opens its gates on sentence ends measures distance in "
    "sentences (left) where a head that opens them on every token gets the ordinary "
    "token distance (middle). The gate weights are set by hand here (q·k / sqrt(d) = "
    "+8 on '.', -8 elsewhere), not trained, and the positions come from the library's "
    "`CoPEEncoding.gated_positions` (`pe=\"cope\"`).")


def cope_panel(out_dir: Path) -> Panel:
    tokens = words()
    t = len(tokens)
    heads = {"sentence ends (gate on '.')": [tok == "." for tok in tokens],
             "every token (gate on all)": [True] * t}
    results = {label: counted_positions(gated) for label, gated in heads.items()}
    fig, axes = new_figure(13, 6.4, 1, 3, gridspec_kw={"width_ratios": [1, 1, 1.1]})
    cmap = colormap("viridis")
    for ax, (label, (_, pos)) in zip(axes[0][:2], results.items()):
        hidden = torch.ones(t, t, dtype=torch.bool).triu(1)
        image = ax.imshow(pos.masked_fill(hidden, float("nan")).numpy(), cmap=cmap, vmin=0,
                          vmax=float(pos.max()))
        fig.colorbar(image, ax=ax, shrink=0.6, label="p_ij (blank: hidden keys)")
        ax.set_xticks(range(t), tokens, rotation=90, fontsize=8)
        ax.set_yticks(range(t), tokens, fontsize=8)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        ax.set_title(f"p_ij, gates on {label.split(' (')[0]}", fontsize=10)
        if label.startswith("sentence"):
            for i in range(t):
                for j in range(i + 1):
                    ax.text(j, i, f"{float(pos[i, j]):.0f}", ha="center", va="center",
                            fontsize=6, color="white" if pos[i, j] < 2 else "black")
    right = axes[0][2]
    last = t - 1
    for (label, (_, pos)), colour in zip(results.items(), ("tab:red", "tab:blue")):
        right.plot(range(t), pos[last], marker="o", color=colour, label=label)
    right.set_xticks(range(t), tokens, rotation=90, fontsize=8)
    right.set_ylabel(f"CoPE position p_ij of each key from the last query ('{tokens[last]}')")
    right.set_title("the last row: sentences vs tokens counted", fontsize=10)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=9, loc="upper right")
    images = [save(fig, out_dir, "cope_positions.png")]
    caption = COPE_CAPTION
    data = {"tokens": tokens, "gate_logit": GATE_LOGIT, "head_dim": HEAD_DIM,
            "heads": {label: {"gated": heads[label], "gates": gates, "positions": pos}
                      for label, (gates, pos) in results.items()}}
    return Panel("cope_positions", "CoPE: positions counted by content", caption, images, data)
