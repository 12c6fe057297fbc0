"""Perplexity of any causal LM over a long token stream, by windows of a given length.

Works for every model through a callable ``logits_fn(ids (1, T)) -> logits (1, T, V)``, so the
lab's models and patched Hugging Face models share one implementation.

- non-overlapping windows (as in the ALiBi paper): the stream is cut into windows of
  ``length`` tokens and every token is scored with the context inside its window;
- sliding windows with a ``stride`` (< ``length``): each window scores only its last
  ``stride`` tokens (all of the first window), so every token is scored once and sees at
  least ``length - stride`` tokens of context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import UserError

LogitsFn = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class PerplexityResult:
    """Mean negative log-likelihood (nats/token) over ``n_tokens`` scored tokens."""

    nll: float
    n_tokens: int
    n_windows: int

    @property
    def ppl(self) -> float:
        return math.exp(self.nll) if self.nll < 700 else float("inf")


def windows(n_tokens: int, length: int, stride: int | None = None,
            eval_windows: int | None = None) -> Iterator[tuple[int, int, int]]:
    """Yield (start, end, n_scored) windows over a stream of ``n_tokens`` tokens, at most
    ``eval_windows`` of them (None: as many as fit).

    Without a stride the windows do not overlap and all tokens but the first of each are
    scored. With a stride, each window ends ``stride`` tokens after the previous one.
    """
    if length < 2:
        raise UserError(f"window length must be >= 2, got {length}")
    if n_tokens < length:
        raise UserError(f"need at least {length} tokens for windows of {length}, "
                         f"have {n_tokens}")
    if stride is not None and not 1 <= stride < length:
        raise UserError(f"stride must be in [1, length - 1 = {length - 1}], got {stride}")
    count = 0
    if stride is None:
        for start in range(0, n_tokens - length + 1, length):
            if eval_windows is not None and count >= eval_windows:
                return
            yield start, start + length, length - 1
            count += 1
        return
    end = length
    yield 0, length, length - 1
    count = 1
    while end + stride <= n_tokens and (eval_windows is None or count < eval_windows):
        end += stride
        yield end - length, end, stride
        count += 1


@torch.no_grad()
def perplexity(logits_fn: LogitsFn, tokens: Tensor, length: int, stride: int | None = None,
               eval_windows: int | None = None,
               progress: Callable[[int], None] | None = None,
               batch_size: int = 1,
               on_window: Callable[[float, int], None] | None = None) -> PerplexityResult:
    """Perplexity of ``logits_fn`` on a 1-D token stream with windows of ``length`` tokens
    (at most ``eval_windows``; the result's ``n_windows`` is how many were scored).

    ``batch_size`` windows that score the same number of tokens go through ``logits_fn``
    together as ids (B, length); the result does not depend on it. ``progress`` is called with
    the number of windows done after each batch; ``on_window`` with each window's mean NLL and
    scored tokens, in window order (from the same cross-entropy as the total).
    """
    if tokens.dim() != 1:
        raise UserError(f"tokens must be a 1-D stream, got shape {tuple(tokens.shape)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    total, count, n_windows = 0.0, 0, 0
    batch: list[tuple[int, int]] = []

    def flush(n_scored: int) -> None:
        nonlocal total, count, n_windows
        ids = torch.stack([tokens[s:e] for s, e in batch]).long()           # (B, L)
        logits = logits_fn(ids)[:, -n_scored - 1:-1].float()                 # (B, n, V)
        targets = ids[:, -n_scored:].to(logits.device)                       # (B, n)
        nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        sums = nll.view(len(batch), n_scored).sum(1).tolist()                # B floats
        total += sum(sums)
        if on_window is not None:
            for window_sum in sums:
                on_window(window_sum / n_scored, n_scored)
        count += n_scored * len(batch)
        n_windows += len(batch)
        batch.clear()
        if progress is not None:
            progress(n_windows)

    current = None
    for start, end, n_scored in windows(tokens.numel(), length, stride, eval_windows):
        if batch and (n_scored != current or len(batch) == batch_size):
            flush(current)
        batch.append((start, end))
        current = n_scored
    if batch:
        flush(current)
    return PerplexityResult(total / count, count, n_windows)
