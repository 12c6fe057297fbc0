"""Atlas panels of one trained run: the model's learned position terms (bias against
distance per layer and head, or its absolute position vectors in 2-D) and its attention
maps per layer (mean over heads) at the training length L and at 4L on held-out text.

Works on a ``posenc train`` run directory and on ``runs/<encoding>/seed<k>`` inside a
``posenc compare`` directory (both are the same kind of run).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..data.batches import prepare_data
from ..encodings.base import PositionalEncoding
from ..errors import UserError
from ..eval.lengths import NotEvaluated, encodings_of, not_served
from ..train.checkpoint import LoadedRun, load_run
from .absolute import draw_trajectories, pca_2d, position_vectors
from .biases import bias_against_distance, draw_head_curves
from .figure import Panel, colormap, new_figure, save

#: attention maps are averaged over square blocks down to at most this many rows
MAP_SIZE = 128
#: attention weights below this are drawn as this (log colour scale)
MAP_FLOOR = 1e-4


def load_atlas_run(run_dir: str | Path) -> LoadedRun:
    """The run in ``run_dir`` on the CPU; a one-line UserError / FileNotFoundError for a
    missing directory or one without a run (pointing into a compare directory's runs/)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    if not (run_dir / "config.json").is_file():
        inner = sorted({p.parent.parent.name for p in run_dir.glob("runs/*/seed*/config.json")})
        seeds = sorted(p.parent.name for p in run_dir.glob("seed*/config.json"))
        hint = ""
        if inner:
            hint = (f"; a compare directory: pick one of {run_dir}/runs/<encoding>/seed<k> "
                    f"({', '.join(inner)})")
        elif seeds:
            hint = (f"; an encoding of a compare directory: pick one of its seeds "
                    f"({', '.join(seeds)})")
        raise UserError(f"{run_dir} holds no trained run (no config.json){hint}")
    return load_run(run_dir, "cpu")


def _layer_encodings(loaded: LoadedRun) -> list[PositionalEncoding]:
    """One encoding per layer (the shared one repeated when layers share it)."""
    found = encodings_of(loaded.model)
    return found if len(found) > 1 else found[:1]


def _has_bias_curve(pe: PositionalEncoding) -> bool:
    """A bias against distance exists (not for a bias of the content, which reads no
    position: the forget gate)."""
    return type(pe).family == "bias" and pe.has_bias and not pe.position_free


def learned_terms_panel(loaded: LoadedRun, out_dir: Path) -> Panel | None:
    """Bias against distance per layer (bias encodings) or the trained position vectors in
    2-D (encodings with an ``embed`` hook); None for encodings with neither."""
    cfg = loaded.train_config
    name, train_len = cfg.model.pe, cfg.train_len
    layers = _layer_encodings(loaded)
    if _has_bias_curve(layers[0]):
        n = 4 * train_len
        curves = [bias_against_distance(pe, n) for pe in layers]
        cols = min(len(curves), 3)
        rows = math.ceil(len(curves) / cols)
        fig, axes = new_figure(4.6 * cols + 0.6, 3.8 * rows + 0.6, rows, cols)
        distance = torch.arange(n)
        for i, ax in enumerate(axes.flat):
            if i >= len(curves):
                ax.set_visible(False)
                continue
            draw_head_curves(ax, distance, curves[i], colormap("viridis"))
            ax.axvline(train_len, color="tab:red", linestyle="--", linewidth=1)
            ax.set_title(f"layer {i + 1}" if len(curves) > 1 else "all layers (shared)")
            ax.set_xlabel("distance d = query - key (tokens; red: L)")
            ax.set_ylabel("bias added to the logit")
            ax.grid(True, alpha=0.3)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 8),
                   fontsize=9)
        trainable = any(True for pe in layers for _ in pe.parameters())
        kind = "learned" if trainable else "fixed"
        fig.suptitle(f"{name}: {kind} bias after {loaded.steps} steps")
        compare = ("Compare with the same encoding at initialisation in the distance-bias "
                   "panel above to see what training changed." if trainable else
                   f"{name} has no parameters, so training leaves this bias as it was.")
        caption = (
            f"The bias this {name} model adds for a key d tokens back, per head and layer, "
            f"after {loaded.steps} training steps at L = {train_len}; distances past the red "
            f"line never occurred in training. {compare}")
        data = {"encoding": name, "train_len": train_len, "distance": distance,
                "bias_per_layer": curves}
    elif type(layers[0]).overrides("embed"):
        pe = layers[0]
        width = cfg.model.d_model
        limit = pe.position_limit                      # a table that may stop before 4L
        n = 4 * train_len if limit is None else min(4 * train_len, limit.positions)
        vectors = position_vectors(pe, n, width)
        coords, explained = pca_2d(vectors, min(train_len, n))
        found = {f"{name} after {loaded.steps} steps": {"positions": n, "coords": coords,
                                                        "explained": explained}}
        fig, axes = new_figure(7.5, 5.6)
        draw_trajectories(fig, axes, found, train_len)
        caption = (
            f"The position vectors of this trained {name} model (width {width}) projected "
            f"onto their two main directions inside the training length L = {train_len}, "
            f"with positions L..4L-1 as red crosses where the encoding defines them. Compare "
            f"with the same encoding at initialisation in the absolute-encoding panel above.")
        data = {"encoding": name, "train_len": train_len, "positions": n, "coords": coords,
                "explained": explained}
    else:
        return None
    images = [save(fig, out_dir, "run_learned_terms.png")]
    return Panel("run_learned_terms", f"This run: the position terms of {name}",
                 caption, images, data)


def held_out_windows(loaded: LoadedRun, lengths: list[int]) -> dict[int, Tensor | str]:
    """One validation window (1, n) per length, or a note why there is none."""
    cfg = loaded.train_config
    data = prepare_data(cfg.data, loaded.tokenizer, cfg.task, cfg.train_len, cfg.cache_dir)
    out: dict[int, Tensor | str] = {}
    for n in lengths:
        try:
            out[n] = data.validation_set(1, n, cfg.seed).inputs[:1]
        except ValueError as err:
            out[n] = f"no held-out window of {n} tokens ({str(err).splitlines()[0]})"
    return out


def block_mean(weights: Tensor, size: int = MAP_SIZE) -> tuple[Tensor, int]:
    """Average an (n, n) map over k x k blocks so it has at most ``size`` rows: (n/k, n/k)
    and k."""
    n = weights.shape[-1]
    k = max(1, math.ceil(n / size))
    while n % k:
        k += 1
    pooled = weights.reshape(n // k, k, n // k, k).mean(dim=(1, 3))
    return pooled, k


@torch.no_grad()
def attention_maps(loaded: LoadedRun) -> dict[str, Any]:
    """Per layer mean-over-heads attention at L and 4L on held-out text (eager backend)."""
    train_len = loaded.train_config.train_len
    lengths = [train_len, 4 * train_len]
    windows = held_out_windows(loaded, lengths)
    maps: dict[str, Any] = {}
    for n in lengths:
        skipped = not_served(loaded.model, n)
        window = windows[n]
        if skipped is not None or isinstance(window, str):
            maps[str(n)] = {"note": window if skipped is None else skipped.note}
            continue
        try:
            _, weights = loaded.model(window, backend="eager", need_weights=True)
        except ValueError as err:
            # a refusal no limit declares (xpos's scales overflowing float16 autocast)
            maps[str(n)] = {"note": NotEvaluated.from_error(err).note}
            continue
        layers = []
        block = 1
        for w in weights:                                   # (1, H, n, n) per layer
            pooled, block = block_mean(w[0].float().mean(dim=0))
            layers.append(pooled)
        maps[str(n)] = {"block": block, "layers": layers}
    return {"train_len": train_len, "lengths": lengths, "maps": maps}


def attention_panel(loaded: LoadedRun, out_dir: Path, preface: str = "") -> Panel:
    from matplotlib.colors import LogNorm

    found = attention_maps(loaded)
    name, steps = loaded.train_config.model.pe, loaded.steps
    n_layers = loaded.train_config.model.n_layers
    lengths = found["lengths"]
    fig, axes = new_figure(3.3 * n_layers + 1.2, 3.3 * len(lengths) + 0.4, len(lengths),
                           n_layers)
    image = None
    notes = []
    for row, n in enumerate(lengths):
        entry = found["maps"][str(n)]
        label = "L" if n == found["train_len"] else f"{n // found['train_len']}L"
        for col in range(n_layers):
            ax = axes[row, col]
            if "note" in entry:
                ax.axis("off")
                if col == 0:
                    ax.text(0.0, 0.5, f"{n} tokens ({label}): {entry['note']}", fontsize=9,
                            wrap=True, va="center")
                    notes.append(f"at {n} tokens: {entry['note']}")
                continue
            pooled = entry["layers"][col]
            pooled = torch.where(pooled > 0, pooled.clamp(min=MAP_FLOOR),
                                 torch.full_like(pooled, float("nan")))   # masked: blank
            block = entry["block"]
            image = ax.imshow(pooled.numpy(), cmap="viridis", norm=LogNorm(MAP_FLOOR, 1),
                              extent=(0, n, n, 0), interpolation="nearest")
            ax.set_title(f"layer {col + 1}, {n} tokens ({label})", fontsize=10)
            blocks = f" (mean of {block}x{block} blocks)" if block > 1 else ""
            ax.set_xlabel(f"key position{blocks}", fontsize=9)
            ax.set_ylabel("query position", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes, label="attention weight, mean over heads (log)",
                     shrink=0.8)
    fig.suptitle(f"{name} after {steps} steps: attention on held-out text")
    images = [save(fig, out_dir, "run_attention.png")]
    missing = (" " + "; ".join(notes).capitalize() + ".") if notes else ""
    caption = preface + (
        f"Attention weights of each layer of this {name} model, averaged over heads, on a "
        f"held-out window at the training length L = {found['train_len']} and at 4L, on a "
        f"log colour scale (weights below {MAP_FLOOR:g} drawn as {MAP_FLOOR:g}, keys a "
        f"causal mask hides left blank). A band "
        f"along the diagonal is attention to nearby tokens and a bright first column is "
        f"attention parked on the first token; what changes between L and 4L is what the "
        f"model does with distances it never saw.{missing}")
    data = {"encoding": name, "steps": steps, **found}
    return Panel("run_attention", "This run: attention maps at L and 4L", caption, images, data)


def run_panels(loaded: LoadedRun, out_dir: Path,
               progress: Callable[[str], Any] | None = None) -> list[Panel]:
    """The panels of one trained run: learned terms (when the encoding has any) and
    attention maps."""
    panels = []
    if progress:
        progress("run_learned_terms")
    learned = learned_terms_panel(loaded, out_dir)
    if learned is not None:
        panels.append(learned)
    if progress:
        progress("run_attention")
    preface = "" if learned is not None else (
        f"The atlas draws learned position terms that are a bias of the distance or a vector "
        f"per position, and {loaded.train_config.model.pe} has neither, so this run adds only "
        f"its attention maps. ")
    panels.append(attention_panel(loaded, out_dir, preface))
    return panels
