"""Perplexity against a list of evaluation lengths, for a model trained at one length.

Each length is scored on the same held-out stream with :func:`posenc.eval.perplexity.perplexity`
(non-overlapping windows as in the ALiBi paper, or sliding windows with a stride), under
``torch.no_grad`` and the ``auto`` attention backend: SDPA's causal kernel for encodings
without a bias (memory O(n) per head), FlexAttention for biased ones from
``FLEX_MIN_LEN`` keys, so 16x the training length fits in memory.

A length past the position limit an encoding declares (a learned table) is not run: its
result carries a :class:`NotEvaluated` saying why, whose ``note`` is the text results files
store (``"n/a (past learned table of 128)"``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..encodings.limits import PositionLimit, tightest_limit
from ..errors import UserError
from .perplexity import perplexity, windows

#: tokens per forward pass when windows are batched (B = batch_tokens // length)
DEFAULT_BATCH_TOKENS = 8192


@dataclass(frozen=True)
class NotEvaluated:
    """Why a length has no result: it is past a declared position ``limit``, or the model
    refused it for a reason no limit declares (``refusal``: its error's first clause)."""

    limit: PositionLimit | None = None
    refusal: str | None = None

    @classmethod
    def from_error(cls, err: Exception) -> NotEvaluated:
        return cls(refusal=str(err).split(";")[0].strip().rstrip("."))

    @property
    def reason(self) -> str:
        """``"past learned table of 128"``, or the refusal."""
        if self.limit is not None:
            return f"past {self.limit.kind} {self.limit.bound} of {self.limit.positions}"
        return self.refusal or "not evaluated"

    @property
    def note(self) -> str:
        """The text results files store for the length: ``"n/a (<reason>)"``."""
        return f"n/a ({self.reason})"


def note_reason(note: str) -> str:
    """The reason inside a stored :attr:`NotEvaluated.note` (as read back from a file)."""
    return note.removeprefix("n/a (").removesuffix(")")


class SkippedNote:
    """For a result with a ``skipped`` field: ``note``, the text results files store for a
    length that was not evaluated (None when it was)."""

    skipped: NotEvaluated | None

    @property
    def note(self) -> str | None:
        return None if self.skipped is None else self.skipped.note


@dataclass(frozen=True)
class LengthResult(SkippedNote):
    """Perplexity at one evaluation length; ``ppl`` is None and ``skipped`` set when n/a."""

    length: int
    ppl: float | None
    nll: float | None
    n_tokens: int
    n_windows: int
    seconds: float
    skipped: NotEvaluated | None = None

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


def position_limit(model: nn.Module) -> PositionLimit | None:
    """The tightest position limit the encodings of ``model`` declare (None: no bound)."""
    return tightest_limit(pe.position_limit for pe in encodings_of(model))


def not_served(model: nn.Module, length: int) -> NotEvaluated | None:
    """Why ``model`` cannot serve positions 0..length-1 (past a declared limit), else None."""
    limit = position_limit(model)
    return None if limit is None or limit.serves(length) else NotEvaluated(limit)


def as_token_tensor(tokens: Tensor | np.ndarray, n: int | None = None) -> Tensor:
    """The first ``n`` tokens (all if None) of a 1-D tensor or (memory-mapped) array as int64."""
    if isinstance(tokens, Tensor):
        out = tokens[:n] if n is not None else tokens
        return out.long()
    arr = np.asarray(tokens[:n] if n is not None else tokens)
    return torch.from_numpy(arr.astype(np.int64, copy=True))


def eval_windows_for(length: int, stride: int | None, max_tokens: int | None) -> int | None:
    """The evaluation windows to score at most so that at most ``max_tokens`` tokens are
    read (at least one; None: no limit)."""
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
        errors: ``"raise"``, or ``"note"``: a UserError (or any ValueError) from the model
            at a length it declares it serves becomes an n/a result carrying its message.
            Lengths past a declared position limit are never run (an n/a result either way).

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
            skipped = not_served(model, length)
            if skipped is not None:
                results.append(LengthResult(length, None, None, 0, 0, 0.0, skipped))
            else:
                eval_windows = eval_windows_for(length, stride, max_tokens)
                last_end = max(end for _, end, _ in windows(n_available, length, stride,
                                                            eval_windows))
                stream = as_token_tensor(tokens, last_end)
                try:
                    r = perplexity(logits_fn, stream, length, stride, eval_windows=eval_windows,
                                   batch_size=max(1, batch_tokens // length))
                except ValueError as err:    # a refusal no limit declares (xpos's scales
                    if errors == "raise":    # overflowing float16 under autocast)
                        raise
                    results.append(LengthResult(length, None, None, 0, 0,
                                                time.perf_counter() - start,
                                                NotEvaluated.from_error(err)))
                else:
                    results.append(LengthResult(length, r.ppl, r.nll, r.n_tokens, r.n_windows,
                                                time.perf_counter() - start))
            if progress is not None:
                progress(1)
    finally:
        model.train(was_training)
    return results
