"""Perplexity against length that keeps every window's loss, so noise can be estimated.

Scores the same windows as :func:`posenc.eval.lengths.perplexity_at_lengths` (non-overlapping
or strided, from the start of the held-out stream, at most ``max_tokens`` per length) and
returns, per length, each window's mean negative log-likelihood and scored-token count. The
overall perplexity is exp(sum(nll_i * n_i) / sum(n_i)), the number results.json reports; the
windows feed the bootstrap of :mod:`posenc.lab.claims.stats`.

A length past an encoding's declared position limit (a learned table) is not run: its
:class:`WindowLosses` carries a :class:`~posenc.eval.lengths.NotEvaluated` saying why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...eval.lengths import (
    DEFAULT_BATCH_TOKENS,
    NotEvaluated,
    SkippedNote,
    as_token_tensor,
    eval_windows_for,
    model_logits_fn,
    not_served,
    validate_lengths,
)
from ...eval.perplexity import windows


@dataclass(frozen=True)
class WindowLosses(SkippedNote):
    """Per-window losses at one length; ``skipped`` set (and no windows) when n/a."""

    length: int
    nll: tuple[float, ...]          # mean nll (nats/token) of each window
    tokens: tuple[int, ...]         # tokens scored in each window
    skipped: NotEvaluated | None = None

    @property
    def n_tokens(self) -> int:
        return sum(self.tokens)

    @property
    def ppl(self) -> float | str:
        """The perplexity, ``"inf"``/``"nan"``, or the n/a note (what results.json stores)."""
        if self.note is not None:
            return self.note
        mean = sum(n * t for n, t in zip(self.nll, self.tokens)) / max(1, self.n_tokens)
        if math.isnan(mean):
            return "nan"
        return math.exp(mean) if mean < 700 else "inf"


@torch.no_grad()
def window_losses(model: nn.Module, tokens: Tensor | np.ndarray, lengths: Sequence[int], *,
                  stride: int | None = None, max_tokens: int | None = None,
                  batch_tokens: int = DEFAULT_BATCH_TOKENS,
                  progress: Callable[[int], None] | None = None) -> list[WindowLosses]:
    """Per-window losses of ``model`` at each length (sorted), on a 1-D held-out stream."""
    lengths = validate_lengths(list(lengths), stride, len(tokens))
    was_training = model.training
    model.eval()
    logits_fn = model_logits_fn(model)
    out = []
    try:
        for length in lengths:
            skipped = not_served(model, length)
            if skipped is None:
                try:
                    out.append(_score(logits_fn, tokens, length, stride,
                                      eval_windows_for(length, stride, max_tokens),
                                      max(1, batch_tokens // length)))
                except ValueError as err:
                    # a refusal no limit declares (xpos's scales overflowing float16 autocast)
                    skipped = NotEvaluated.from_error(err)
            if skipped is not None:
                out.append(WindowLosses(length, (), (), skipped))
            if progress is not None:
                progress(1)
    finally:
        model.train(was_training)
    return out


def _score(logits_fn, tokens, length: int, stride: int | None, eval_windows: int | None,
           batch_size: int) -> WindowLosses:
    spans = list(windows(len(tokens), length, stride, eval_windows))
    stream = as_token_tensor(tokens, max(end for _, end, _ in spans))
    nll: list[float] = []
    counts: list[int] = []
    i = 0
    while i < len(spans):                  # batches of windows that score equally many tokens
        n_scored = spans[i][2]
        j = i
        while j < len(spans) and j - i < batch_size and spans[j][2] == n_scored:
            j += 1
        ids = torch.stack([stream[s:e] for s, e, _ in spans[i:j]])          # (B, length)
        logits = logits_fn(ids)[:, -n_scored - 1:-1].float()                # (B, n, V)
        loss = F.cross_entropy(logits.transpose(1, 2), ids[:, -n_scored:],
                               reduction="none")                            # (B, n)
        nll += loss.mean(dim=1).tolist()
        counts += [n_scored] * (j - i)
        i = j
    return WindowLosses(length, tuple(nll), tuple(counts))
