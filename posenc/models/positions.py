"""Positions and masks of real batches: padding, packed documents, continuing a KV cache.

A model computes them once per forward and hands them to every layer:

- no mask: positions ``start .. start + T - 1`` (one run shared by the batch);
- ``attention_mask`` (B, T), 1 for real tokens and 0 for padding: each sequence counts its
  real tokens only, continuing from where its cache stopped; padding takes the position of
  the nearest real token before it (0 before the first), no query sees it as a key, and as
  a query it sees its own key only;
- ``document_ids`` (B, T): several documents packed into each row, each restarting at 0
  and seeing only itself (attention is block-diagonal). A document is a run of equal ids:
  ``[0, 0, 1, 1, 0, 0]`` holds three documents, the two runs of id 0 never see each other;
- positions per axis (A, B, T) for an encoding reading A > 1 axes (M-RoPE, axial RoPE):
  they reach its hooks only; masks and caches count tokens as above.

Everything here is tensor arithmetic (no value is read on the host).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..encodings.checks import check_axis_positions
from ..errors import UserError


def check_mask(name: str, mask: Tensor, shape: tuple[int, int]) -> Tensor:
    """A (B, T) mask of 0/1 or bools as bool; UserError naming ``name`` otherwise."""
    if not isinstance(mask, Tensor) or mask.is_floating_point() or mask.is_complex():
        got = f"dtype {mask.dtype}" if isinstance(mask, Tensor) else type(mask).__name__
        raise UserError(f"{name} must be an integer or bool tensor of 1 (real token) and 0 "
                         f"(padding), got {got}")
    if tuple(mask.shape) != tuple(shape):
        raise UserError(f"{name} must have shape {tuple(shape)} (batch, length), like the "
                         f"token ids, got {tuple(mask.shape)}")
    return mask.bool() if mask.dtype != torch.bool else mask


def check_documents(document_ids: Tensor, shape: tuple[int, int]) -> Tensor:
    """document_ids must be an integer (B, T) tensor; returns (B, T) int64 run numbers:
    0 for the row's first run of equal ids, counting up by one where the id changes, so
    each run is its own document even where an id comes back after another."""
    if not isinstance(document_ids, Tensor) or document_ids.is_floating_point() or \
            document_ids.dtype == torch.bool or document_ids.is_complex():
        got = f"dtype {document_ids.dtype}" if isinstance(document_ids, Tensor) \
            else type(document_ids).__name__
        raise UserError(f"document_ids must be an integer tensor, got {got}")
    if tuple(document_ids.shape) != tuple(shape):
        raise UserError(f"document_ids must have shape {tuple(shape)} (batch, length), "
                         f"like the token ids, got {tuple(document_ids.shape)}")
    return document_runs(document_ids)


def document_runs(document_ids: Tensor) -> Tensor:
    """document_ids (B, T) -> (B, T) int64: the number of each token's run of equal ids."""
    runs = torch.zeros(document_ids.shape, dtype=torch.long, device=document_ids.device)
    runs[:, 1:] = torch.cumsum((document_ids[:, 1:] != document_ids[:, :-1]).long(), dim=1)
    return runs


def axis_positions(positions: Tensor, n_axes: int, shape: tuple[int, int]) -> Tensor:
    """positions (A, B, T) along the ``n_axes`` axes of the model's encoding, for ids of
    ``shape`` (B, T); UserError naming ``positions`` otherwise."""
    if n_axes < 2:
        b, t = shape
        raise UserError(f"positions must have shape ({t},) or ({b}, {t}), one position per "
                        f"token, got shape {tuple(positions.shape)}; positions per axis (axis, "
                        f"batch, length) need an encoding with several position axes (mrope, "
                        f"axial_rope)")
    check_axis_positions("positions", positions, n_axes, shape[1], shape[0])
    return positions


def positions_from_mask(mask: Tensor, start: Tensor) -> Tensor:
    """mask (B, T) bool, start (B,) -> (B, T): start + the real tokens before each token;
    a padding token repeats the position of the real token before it (start before any)."""
    seen = torch.cumsum(mask.to(torch.long), dim=1)                       # (B, T)
    return start[:, None] + (seen - 1).clamp(min=0)


def positions_from_documents(document_ids: Tensor) -> Tensor:
    """document_ids (B, T) -> (B, T): each token's index within its run of equal ids."""
    b, t = document_ids.shape
    index = torch.arange(t, device=document_ids.device).expand(b, t)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    first = torch.where(starts, index, 0).cummax(dim=1).values           # (B, T)
    return index - first


def distances_match_indices(key_valid: Tensor | None, documents: Tensor | None) -> bool:
    """Whether the positions a model builds from these masks (no cache) differ from the
    indices 0..T-1 by one constant over every pair a query sees, so that a translation-
    invariant encoding may read the run 0..T-1 instead of the (B, T) positions.

    A padding query sees its own key only (distance 0 either way), so only the real tokens
    count: True when each document id forms one run of its row (positions restart per run
    and a query sees its own run only), or, without documents, when the real tokens of every
    row are contiguous (padding on the left, the right or both: they count on from 0). Padding
    between real tokens gives False. The answer is read on the host: only for CPU tensors
    outside torch.compile (elsewhere False, so nothing waits for a device).
    """
    masks = [m for m in (documents, key_valid) if m is not None]
    if not masks or any(m.device.type != "cpu" for m in masks) or \
            torch.compiler.is_compiling():
        return False
    if documents is not None:
        runs = (documents[:, 1:] != documents[:, :-1]).sum(dim=1)                  # (B,)
        ordered = documents.sort(dim=1).values
        distinct = (ordered[:, 1:] != ordered[:, :-1]).sum(dim=1)                  # (B,)
        return bool((runs == distinct).all())
    t = key_valid.shape[1]
    index = torch.arange(t)
    first = torch.where(key_valid, index, t).amin(dim=1)                            # (B,)
    last = torch.where(key_valid, index, -1).amax(dim=1)
    count = key_valid.sum(dim=1)
    return bool(((count == 0) | (last - first + 1 == count)).all())
