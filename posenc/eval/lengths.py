"""Perplexity against a list of evaluation lengths, for a model trained at one length.

Each length is scored on the same held-out stream with :func:`posenc.eval.perplexity.perplexity`
(non-overlapping windows as in the ALiBi paper, or sliding windows with a stride), under
``torch.no_grad`` and the ``auto`` attention backend: SDPA's causal kernel for encodings
without a bias (memory O(n) per head), FlexAttention for biased ones from
``FLEX_MIN_LEN`` keys, so 16x the training length fits in memory.

An encoding that cannot serve a position (a learned table) gives a result whose ``note`` says
so (``"n/a (past learned table of 128)"``) instead of raising.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import UserError
from .perplexity import perplexity, windows

#: tokens per forward pass when windows are batched (B = batch_tokens // length)
DEFAULT_BATCH_TOKENS = 8192


@dataclass(frozen=True)
class LengthResult:
    """Perplexity at one evaluation length; ``ppl`` is None and ``note`` set when n/a."""

    length: int
    ppl: float | None
    nll: float | None
    n_tokens: int
    n_windows: int
    seconds: float
    note: str | None = None

    @property
    def value(self) -> float | str:
        """What results.json stores: the perplexity, ``"inf"``/``"nan"``, or the n/a note."""
        if self.ppl is None:
            return self.note or "n/a"
        if math.isnan(self.ppl):
            return "nan"
        return self.ppl if math.isfinite(self.ppl) else "inf"


def eval_device() -> str:
    """Where evaluation runs: the GPU when there is one, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def encodings_of(model: nn.Module) -> list[nn.Module]:
    """The model's positional encoding modules (shared and per-layer)."""
    from ..encodings.base import PositionalEncoding
    return [m for m in model.modules() if isinstance(m, PositionalEncoding)]


def unsupported_length(model: nn.Module, length: int) -> str | None:
    """The n/a note if some encoding of ``model`` cannot serve positions 0..length-1, else None.

    Asks each encoding that bounds its positions (``check_positions``), never its name.
    """
    last = torch.tensor([length - 1])
    for pe in encodings_of(model):
        check = getattr(pe, "check_positions", None)
        if check is None:
            continue
        try:
            check(last)
        except ValueError:
            return f"n/a (past learned table of {pe.max_len})"
    return None


def na_note(err: Exception) -> str:
    """``"n/a (<first clause of the error>)"`` for a length a model refused."""
    text = str(err).split(";")[0].strip().rstrip(".")
    return f"n/a ({text})"


def as_token_tensor(tokens: Tensor | np.ndarray, n: int | None = None) -> Tensor:
    """The first ``n`` tokens (all if None) of a 1-D tensor or (memory-mapped) array as int64."""
    if isinstance(tokens, Tensor):
        out = tokens[:n] if n is not None else tokens
        return out.long()
    arr = np.asarray(tokens[:n] if n is not None else tokens)
    return torch.from_numpy(arr.astype(np.int64, copy=True))


def window_budget(length: int, stride: int | None, max_tokens: int | None) -> int | None:
    """Most windows to score so that at most ``max_tokens`` tokens are read (at least one)."""
    if max_tokens is None:
        return None
    if stride is None:
        return max(1, max_tokens // length)
    return max(1, (max_tokens - length) // stride + 1)


def validate_lengths(lengths: Sequence[int], stride: int | None = None,
                     n_tokens: int | None = None) -> list[int]:
    """Check a list of evaluation lengths (and a stride) and return it sorted and unique."""
    if not lengths:
        raise UserError("lengths must name at least one evaluation length")
    for length in lengths:
        if isinstance(length, bool) or not isinstance(length, int) or length < 2:
            raise UserError(f"evaluation lengths must be integers >= 2, got {length!r}")
    out = sorted(set(lengths))
    if stride is not None:
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
            raise UserError(f"stride must be an integer >= 1, got {stride!r}")
        if stride >= out[0]:
            raise UserError(f"stride must be in [1, shortest length - 1 = {out[0] - 1}], "
                             f"got {stride}")
    if n_tokens is not None and out[-1] > n_tokens:
        raise UserError(f"evaluation length {out[-1]} is longer than the held-out data "
                         f"({n_tokens} tokens); use lengths <= {n_tokens} or more data")
    return out


def model_logits_fn(model: nn.Module, backend: str = "auto") -> Callable[[Tensor], Tensor]:
    """ids (B, T) -> logits (B, T, V) on the model's device, without gradients."""
    device = next(model.parameters()).device

    @torch.no_grad()
    def logits_fn(ids: Tensor) -> Tensor:
        return model(ids.to(device), backend=backend)

    return logits_fn


@torch.no_grad()
def perplexity_at_lengths(model: nn.Module, tokens: Tensor | np.ndarray, lengths: Sequence[int],
                          *, stride: int | None = None, max_tokens: int | None = None,
                          backend: str = "auto", batch_tokens: int = DEFAULT_BATCH_TOKENS,
                          progress: Callable[[int], None] | None = None,
                          errors: str = "raise") -> list[LengthResult]:
    """Perplexity of ``model`` on a held-out stream at each length.

    Args:
        tokens: 1-D token ids (tensor or memory-mapped array).
        lengths: window lengths, e.g. ``[128, 256, 512]``.
        stride: None for non-overlapping windows, else sliding windows with this stride.
        max_tokens: read at most about this many tokens per length (all windows start at 0,
            so every length scores the same leading part of the stream).
        progress: called with 1 after each length.
        errors: ``"raise"``, or ``"note"``: a ValueError from the model at a length (an
            encoding refusing a position) becomes an n/a result carrying its message.

    Returns one :class:`LengthResult` per length, in increasing order.
    """
    if errors not in ("raise", "note"):
        raise UserError(f"errors must be 'raise' or 'note', got {errors!r}")
    n_available = len(tokens)
    lengths = validate_lengths(list(lengths), stride, n_available)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(
            max_tokens, int) or max_tokens < 1):
        raise UserError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, int) or batch_tokens < 1:
        raise UserError(f"batch_tokens must be an integer >= 1, got {batch_tokens!r}")
    was_training = model.training
    model.eval()
    logits_fn = model_logits_fn(model, backend)
    results = []
    try:
        for length in lengths:
            start = time.perf_counter()
            note = unsupported_length(model, length)
            if note is not None:
                results.append(LengthResult(length, None, None, 0, 0, 0.0, note))
            else:
                budget = window_budget(length, stride, max_tokens)
                last_end = max(end for _, end, _ in windows(n_available, length, stride, budget))
                stream = as_token_tensor(tokens, last_end)
                try:
                    r = perplexity(logits_fn, stream, length, stride, max_windows=budget,
                                   batch_size=max(1, batch_tokens // length))
                except ValueError as err:
                    if errors == "raise":
                        raise
                    results.append(LengthResult(length, None, None, 0, 0,
                                                time.perf_counter() - start, na_note(err)))
                else:
                    results.append(LengthResult(length, r.ppl, r.nll, r.n_tokens, r.n_windows,
                                                time.perf_counter() - start))
            if progress is not None:
                progress(1)
    finally:
        model.train(was_training)
    return results
