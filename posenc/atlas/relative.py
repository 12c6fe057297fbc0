"""Relative encodings that clip or bucket distances (Shaw, DeBERTa) and the log-n
temperature: numbers from the encodings' own modules (``clipped_index``,
``distance_rows``, ``attn_scale``)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..encodings.context import HookContext
from ..encodings.registry import build_encoding
from .figure import Panel, dress, log2_axis, new_figure, save

SHAW_CLIP = 16
DEBERTA_BUCKETS, DEBERTA_MAX = 256, 512


def relative_clipping_panel(out_dir: Path) -> Panel:
    shaw = build_encoding("shaw", n_heads=1, head_dim=8, max_relative_position=SHAW_CLIP)
    rel_shaw = torch.arange(-64, 65)
    query = torch.zeros(1, dtype=torch.long)
    shaw_rows = shaw.clipped_index(query, rel_shaw)[0]                 # k - q = rel
    shaw_distance = shaw_rows - SHAW_CLIP
    deberta = build_encoding("deberta", n_heads=1, head_dim=8,
                             position_buckets=DEBERTA_BUCKETS,
                             max_relative_positions=DEBERTA_MAX)
    rel_deberta = torch.arange(-2048, 2049)                             # q - k
    deberta_rows = deberta.distance_rows(rel_deberta)
    deberta_bucket = deberta_rows - deberta.span
    fig, axes = new_figure(13, 4.6, 1, 2)
    left, right = axes[0]
    left.plot(rel_shaw, rel_shaw, color="lightgrey", linewidth=1, label="no clipping")
    left.step(rel_shaw, shaw_distance, where="mid", color="tab:blue", linewidth=1.6,
              label=f"clip(j - i, -{SHAW_CLIP}, {SHAW_CLIP})")
    for sign in (-1, 1):
        left.axvline(sign * SHAW_CLIP, color="tab:red", linestyle=":", linewidth=1.2,
                     label="K: clipping starts" if sign < 0 else None)
    left.set_xlim(-64, 64)
    dress(left, "relative position j - i = key - query (tokens)",
          "distance used (table row - K)", f"Shaw et al.: clipped at K = {SHAW_CLIP}",
          legend="upper left")
    mid = DEBERTA_BUCKETS // 2
    near = rel_deberta.abs() <= deberta.span
    right.plot(rel_deberta[near], rel_deberta[near], color="lightgrey", linewidth=1,
               label="identity (no bucketing)")
    right.plot(rel_deberta, deberta_bucket, color="tab:blue", linewidth=1.6,
               label="log bucket")
    for sign in (-1, 1):
        right.axvline(sign * mid, color="tab:green", linestyle="--", linewidth=1.2,
                      label=f"|delta| = {mid}: log spacing starts" if sign < 0 else None)
        right.axvline(sign * DEBERTA_MAX, color="tab:red", linestyle=":", linewidth=1.2,
                      label=f"max_relative_positions = {DEBERTA_MAX}" if sign < 0 else None)
    right.set_xlim(-2048, 2048)
    dress(right, "relative position delta = query - key (tokens)", "bucket (table row - span)",
          f"DeBERTa: {DEBERTA_BUCKETS} position buckets", legend="upper left")
    images = [save(fig, out_dir, "relative_clipping.png")]
    caption = (
        f"Shaw et al. (2018) learn one key and one value vector per relative position but "
        f"clip the distance at K = {SHAW_CLIP}, so every key further away than K shares the "
        f"same vectors and the model is defined at any length. DeBERTa (He et al., 2021) "
        f"keeps distances up to {mid} exact and squeezes larger ones into logarithmically "
        f"spaced buckets that reach the last row at max_relative_positions = {DEBERTA_MAX}, "
        f"which gives far tokens coarse but distinct positions before they too share one "
        f"row.")
    data = {"shaw": {"relative_position": rel_shaw, "clipped": shaw_distance,
                     "max_relative_position": SHAW_CLIP},
            "deberta": {"relative_position": rel_deberta, "bucket": deberta_bucket,
                        "position_buckets": DEBERTA_BUCKETS,
                        "max_relative_positions": DEBERTA_MAX}}
    return Panel("relative_clipping", "Shaw's clipping and DeBERTa's log buckets", caption,
                 images, data)


#: the caption of :func:`logn_panel` (two sentences, the sources cited)
LOGN_CAPTION = (
    "With more keys to spread over, softmax attention gets flatter, so log-n scaling "
    "(Chiang & Cholak, 2022; Su, 2021) multiplies the logits of a query that sees n keys "
    "by log n / log L, which is 1 up to the training length L and grows slowly after it. "
    "It aims to keep attention as sharp past L as it was at L, and it stays mild: at "
    "16 L it is 1.67 for L = 64 and 1.36 for L = 2048, because the logarithm grows ever "
    "more slowly.")


def logn_panel(out_dir: Path) -> Panel:
    bases = (64, 512, 2048)
    top = 16 * max(bases)
    keys = torch.unique(torch.cat((torch.round(2.0 ** torch.linspace(0, 15, 600)).long(),
                                   2 ** torch.arange(16))))            # every power of two
    factors = {}
    for base in bases:
        pe = build_encoding("nope", n_heads=1, head_dim=8, logn_base_len=base)
        query = HookContext.for_positions(keys - 1, keys - 1, causal=True)   # query at n - 1
        factors[str(base)] = pe.attn_scale(query)
    fig, axes = new_figure(8.5, 4.6)
    ax = axes[0, 0]
    for base, color in zip(bases, ("tab:blue", "tab:orange", "tab:green")):
        ax.plot(keys, factors[str(base)], color=color, linewidth=1.8,
                label=f"trained at L = {base}")
        ax.axvline(base, color=color, linestyle=":", linewidth=1)
    log2_axis(ax, "x", 1, top)
    dress(ax, "keys a query sees n (tokens)", "logit multiplier max(1, log n / log L)",
          "Log-n scaling of the attention logits", legend="upper left")
    images = [save(fig, out_dir, "logn.png")]
    caption = LOGN_CAPTION
    data = {"keys": keys, "factor": factors}
    return Panel("logn", "Log-n: the temperature factor against length", caption, images,
                 data)
