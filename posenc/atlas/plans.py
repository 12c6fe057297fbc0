"""Layer plans and attention windows: which layers of a hybrid rotate, which have no position
encoding (NoPE) and which attend through a sliding or chunked window (one row per named plan
of :mod:`posenc.models.plans`), and the masks of those windows with a learned sink.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..attention.masks import Window, causal_visible
from ..models.plans import NAMED_PLANS, resolve_plan
from .figure import Panel, new_figure, save

#: the model the plans are drawn for: 12 layers, 4096 tokens (windows default to max_len // 4)
N_LAYERS, MAX_LEN = 12, 4096
#: the window masks: positions 0..MASK_LEN-1, windows of WINDOW tokens
MASK_LEN, WINDOW = 12, 4
#: a layer's category (drawn colour): (pe, window kind or None)
CATEGORIES = {("rope", None): ("RoPE, full attention", "#4c72b0"),
              ("rope", "sliding"): ("RoPE, sliding window", "#8fb5e8"),
              ("rope", "chunked"): ("RoPE, chunked window", "#55a868"),
              ("nope", None): ("NoPE, full attention", "#dd8452")}


def plan_layers(plan, n_layers: int = N_LAYERS, max_len: int = MAX_LEN) -> list[dict]:
    """Each layer of ``plan`` (a plan name or dict) as plain data: {"pe", "theta" (RoPE's
    base or None), "window" (tokens or None), "window_kind" (or None)}."""
    rows = []
    for spec in resolve_plan(plan, n_layers=n_layers, max_len=max_len, pe="rope",
                             pe_options={}):
        theta = spec.pe_options.get("theta", 10_000.0) if spec.pe == "rope" else None
        rows.append({"pe": spec.pe, "theta": theta,
                     "window": None if spec.window is None else spec.window.size,
                     "window_kind": None if spec.window is None else spec.window.kind})
    return rows


def _cell_text(layer: dict) -> str:
    theta = "" if layer["theta"] is None else f"{layer['theta'] / 1000:g}k"
    theta = theta.replace("1000k", "1M")
    window = "" if layer["window"] is None else f"\n{layer['window_kind'][0]}{layer['window']}"
    return f"{layer['pe']}\n{theta}{window}".strip()


def layer_plan_panel(out_dir: Path) -> Panel:
    plans = {"all RoPE (plan=None)": None, **{name: name for name in NAMED_PLANS}}
    layers = {label: plan_layers(plan) for label, plan in plans.items()}
    fig, axes = new_figure(12, 4.2, 1, 1)
    ax = axes[0][0]
    for row, (label, plan_rows) in enumerate(layers.items()):
        for i, layer in enumerate(plan_rows):
            name, colour = CATEGORIES[(layer["pe"], layer["window_kind"])]
            ax.add_patch(_rectangle(i, row, colour))
            ax.text(i + 0.5, row + 0.5, _cell_text(layer), ha="center", va="center",
                    fontsize=8.5)
    ax.set_xlim(0, N_LAYERS)
    ax.set_ylim(len(layers), 0)
    ax.set_xticks([i + 0.5 for i in range(N_LAYERS)], [str(i) for i in range(N_LAYERS)])
    ax.set_yticks([r + 0.5 for r in range(len(layers))], list(layers))
    ax.set_xlabel(f"layer (a {N_LAYERS}-layer model with max_len {MAX_LEN}; cell: encoding, "
                  f"RoPE theta, window: s = sliding, c = chunked, in tokens)")
    ax.set_title("Which layers rotate, which have no position encoding, which see a window")
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=c, label=n) for n, c in CATEGORIES.values()], ncol=4,
              loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=9, frameon=False)
    images = [save(fig, out_dir, "layer_plan.png")]
    caption = (
        "A plan gives each layer its own encoding and attention window: Gemma 3 (Gemma Team "
        "2025) runs five sliding-window RoPE layers with theta 10k to one global layer with "
        "theta 1M, SmolLM3 (Hugging Face 2025) drops RoPE in every fourth layer, the RoPE/NoPE "
        "hybrid of Yang et al. (2025), and Llama 4 (Meta 2025) pairs chunked-attention RoPE "
        "layers with a full NoPE layer every fourth. Windows default to max_len // 4 here "
        "(`LMConfig(plan=\"gemma3\")`; `plan={\"name\": \"gemma3\", \"window\": W}` sets "
        "one), and `posenc list` shows every named plan with its options.")
    data = {"n_layers": N_LAYERS, "max_len": MAX_LEN,
            "plans": {label: plan_rows for label, plan_rows in layers.items()}}
    return Panel("layer_plan", "Layer plans: hybrids of RoPE, NoPE and windows", caption,
                 images, data)


def _rectangle(x: int, y: int, colour: str):
    from matplotlib.patches import Rectangle
    return Rectangle((x + 0.04, y + 0.06), 0.92, 0.88, facecolor=colour, edgecolor="white")


def window_visibility(kind: str, size: int = WINDOW, length: int = MASK_LEN) -> Tensor:
    """(length, length) bool: key j visible to query i under the causal mask and a window
    of ``kind`` and ``size`` over positions 0..length-1 (:class:`Window`)."""
    pos = torch.arange(length)
    inside = Window(kind, size).visible(pos, pos)[0, 0]
    return inside & causal_visible(length, length, "cpu")


def window_mask_panel(out_dir: Path) -> Panel:
    masks = {kind: window_visibility(kind) for kind in ("sliding", "chunked")}
    fig, axes = new_figure(12, 5.4, 1, 2)
    cmap = _two_colours()
    for ax, (kind, visible) in zip(axes[0], masks.items()):
        with_sink = torch.cat([torch.full((MASK_LEN, 1), 2), visible.long()], dim=1)
        ax.imshow(with_sink.numpy(), cmap=cmap, vmin=0, vmax=2, aspect="equal")
        ax.axvline(0.5, color="black", linewidth=1.5)
        ax.set_xticks(range(MASK_LEN + 1), ["sink", *map(str, range(MASK_LEN))], fontsize=8)
        ax.set_yticks(range(MASK_LEN), [str(i) for i in range(MASK_LEN)], fontsize=8)
        ax.set_xlabel("key position (column 'sink': a learned logit per head, no value)")
        ax.set_ylabel("query position")
        rule = ("the last 4 tokens, itself included" if kind == "sliding"
                else "its own chunk of 4 tokens: 0-3, 4-7, 8-11")
        ax.set_title(f"{kind} window of {WINDOW}: a query sees {rule}", fontsize=10)
        ax.set_xticks([x - 0.5 for x in range(1, MASK_LEN + 2)], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, MASK_LEN + 1)], minor=True)
        ax.grid(which="minor", color="white", linewidth=0.8)
        ax.tick_params(which="minor", length=0)
    images = [save(fig, out_dir, "window_mask.png")]
    caption = (
        "A sliding window (Beltagy et al. 2020, Longformer; Jiang et al. 2023, Mistral 7B; "
        "Gemma 3, gpt-oss) lets a query see the last `window` tokens, and a chunked window "
        "(Meta 2025, Llama 4) only the tokens of its own chunk, so a KV cache of `window - 1` "
        "tokens is exact for both (`WindowedKVCache`). A learned sink logit per head (gpt-oss, "
        "OpenAI 2025; the attention sinks of Xiao et al. 2024) joins every query's softmax as "
        "an extra column that any query may put weight on, whatever its window "
        "(`LMConfig(attn_sinks=True)`).")
    data = {"length": MASK_LEN, "window": WINDOW,
            "visible": {kind: visible.long() for kind, visible in masks.items()},
            "sink_visible_to_every_query": True}
    return Panel("window_mask", "Attention windows: sliding, chunked, and sinks", caption,
                 images, data)


def _two_colours():
    from matplotlib.colors import ListedColormap
    return ListedColormap(["#f0f0f0", "#4c72b0", "#c44e52"])
