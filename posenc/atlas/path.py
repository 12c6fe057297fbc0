"""PaTH's data-dependent transform on a real sentence (Yang et al. 2025, "PaTH Attention:
Position Encoding via Accumulating Householder Transformations", NeurIPS 2025, Section 3).

A hand-set example, not trained weights: one head of width :data:`HEAD_DIM` whose tokens
write H_t = I - beta_t w_t w_t^T with w_t = e_0 everywhere and beta_t nonzero on sentence
ends (".") only, and whose queries and keys are all e_0. The logit of query i and key j is
then e_0^T H_i ... H_{j+1} e_0 = prod (1 - beta_t) over the sentence ends after the key up
to the query: with beta = 2 (a reflection) the sign flips at every sentence end, a parity no
function of the distance gives; with beta = 1 (a projection) a key behind a sentence end is
erased. A sentence end's own factor already stands between its query and every earlier key.
RoPE's logit for the same vectors depends on the distance only.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..encodings.context import HookContext
from ..encodings.householder_products import path_logits
from ..encodings.registry import build_encoding
from .cope import SENTENCE, words
from .figure import Panel, colormap, new_figure, save

HEAD_DIM = 4
#: beta on a sentence end of each hand-set head (every other token: 0, H = I)
HEADS = {"reflect at '.' (beta = 2)": 2.0, "erase at '.' (beta = 1)": 1.0}
#: RoPE's base for the contrast (a head of width HEAD_DIM)
ROPE_THETA = 10.0


def sentence_logits(tokens: list[str], beta_at_end: float) -> Tensor:
    """Logits (T, T) of the hand-set head (module docstring) from the library's
    ``path_logits`` (what ``PaTHEncoding.score_bias`` computes before the 1/sqrt(D)
    scale), 0 above the diagonal."""
    t = len(tokens)
    unit = torch.zeros(1, 1, t, HEAD_DIM)
    unit[..., 0] = 1.0                                              # q_i = k_j = w_t = e_0
    beta = torch.tensor([beta_at_end if tok == "." else 0.0 for tok in tokens])[None, None]
    return path_logits(unit, unit, unit, beta)[0][0, 0]


def rope_logits(t: int) -> Tensor:
    """RoPE's q_i . k_j (T, T) for q = k = e_0 at positions 0..T-1 (base ROPE_THETA)."""
    pe = build_encoding("rope", n_heads=1, head_dim=HEAD_DIM, theta=ROPE_THETA)
    unit = torch.zeros(1, 1, t, HEAD_DIM)
    unit[..., 0] = 1.0
    pos = torch.arange(t)
    q, k = pe.transform_qk(unit, unit, HookContext.for_positions(pos, pos, causal=True))
    return (q @ k.transpose(-1, -2))[0, 0].tril()


#: the caption of :func:`path_panel` (two sentences, the source cited)
PATH_CAPTION = (
    "PaTH (Yang et al. 2025, Section 3) puts the product of what the tokens between a key and "
    "its query wrote, H_t = I - beta_t w_t w_t^T, between them: a head whose sentence ends "
    "write a reflection (beta = 2) flips the sign of every key across an odd number of "
    "sentence ends (left), one whose sentence ends write a projection (beta = 1) erases the "
    "keys of earlier sentences (middle), where RoPE's logit for the same vectors follows the "
    "distance only (right). The weights are set by hand here (w_t = e_0, q = k = e_0, beta "
    "nonzero on '.' only), not trained; the logits come from the library's `path_logits` "
    "(`pe=\"path\"`) and RoPE's `transform_qk`.")


def path_panel(out_dir: Path) -> Panel:
    tokens = words(SENTENCE)
    t = len(tokens)
    results = {label: sentence_logits(tokens, beta) for label, beta in HEADS.items()}
    rope = rope_logits(t)
    fig, axes = new_figure(13, 5.8, 1, 3, gridspec_kw={"width_ratios": [1, 1, 1.1]})
    cmap = colormap("coolwarm")
    hidden = torch.ones(t, t, dtype=torch.bool).triu(1)
    for ax, (label, logits) in zip(axes[0][:2], results.items()):
        image = ax.imshow(logits.masked_fill(hidden, float("nan")).numpy(), cmap=cmap,
                          vmin=-1, vmax=1)
        fig.colorbar(image, ax=ax, shrink=0.6, label="logit q_i^T H_i ... H_{j+1} k_j (blank: hidden)")
        ax.set_xticks(range(t), tokens, rotation=90, fontsize=8)
        ax.set_yticks(range(t), tokens, fontsize=8)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        ax.set_title(label, fontsize=10)
    right = axes[0][2]
    last = t - 1
    for (label, logits), colour in zip(results.items(), ("tab:red", "tab:blue")):
        right.plot(range(t), logits[last], marker="o", color=colour, label=f"PaTH, {label}")
    right.plot(range(t), rope[last], marker="s", color="tab:gray", linestyle="--",
               label=f"RoPE (base {ROPE_THETA:g}): the distance only")
    right.set_xticks(range(t), tokens, rotation=90, fontsize=8)
    right.set_ylabel(f"logit of each key from the last query ('{tokens[last]}')")
    right.set_title("the last row: content-written vs distance", fontsize=10)
    right.set_ylim(-1.15, 1.45)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8, loc="upper left")
    images = [save(fig, out_dir, "path_transform.png")]
    data = {"tokens": tokens, "head_dim": HEAD_DIM,
            "heads": {label: {"beta_at_sentence_end": HEADS[label], "logits": logits}
                      for label, logits in results.items()},
            "rope": {"theta": ROPE_THETA, "logits": rope}}
    return Panel("path_transform", "PaTH: the transform between key and query is written by "
                 "the tokens between them", PATH_CAPTION, images, data)
