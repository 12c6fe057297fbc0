"""Attention entropy against length.

A query at position p of a causal model spreads its attention over p + 1 keys; the entropy
``-sum_j w_j log w_j`` (nats) is 0 when it looks at one key and ``log(p + 1)`` when it looks at
all of them uniformly. It is said to grow with the sequence length (attention gets more diffuse
past the training length), and log-n scaling (Chiang & Cholak 2022) to counter it; this module
measures it with the eager backend's weights (``need_weights=True``), so lengths stay modest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import UserError
from .lengths import NotEvaluated, SkippedNote, as_token_tensor, not_served, validate_lengths

#: the "tail" of a window: its last quarter of query positions (those seeing the most keys)
TAIL_FRACTION = 0.25


def attention_entropy(weights: Tensor) -> Tensor:
    """Entropy in nats of each query's attention distribution.

    weights (..., Lq, Lk), rows summing to 1 (masked keys 0) -> (..., Lq). 0 log 0 = 0.
    """
    w = weights.float()
    return -torch.special.xlogy(w, w).sum(dim=-1)


@dataclass(frozen=True)
class EntropyResult(SkippedNote):
    """Mean attention entropy (nats) at one length over layers, heads, windows and queries.

    ``tail`` averages only the last quarter of query positions; ``per_layer`` is the mean per
    layer; ``uniform_tail`` is what uniform attention would give on the tail (for scale).
    ``skipped`` says why a length has no result (all numbers None; ``note`` is its text).
    """

    length: int
    mean: float | None
    tail: float | None
    per_layer: tuple[float, ...] | None
    uniform_tail: float
    n_windows: int
    skipped: NotEvaluated | None = None
    #: with ``keep_queries``: each tail query's entropy (mean over layers and heads), window
    #: after window (W * tail,), for a bootstrap over queries
    tail_queries: tuple[float, ...] | None = None

    def to_dict(self) -> dict:
        out = {"mean": self.mean, "tail": self.tail,
               "per_layer": list(self.per_layer) if self.per_layer is not None else None,
               "uniform_tail": self.uniform_tail, "n_windows": self.n_windows,
               "note": self.note}
        if self.tail_queries is not None:
            out["tail_queries"] = [round(v, 5) for v in self.tail_queries]
        return out


def uniform_tail_entropy(length: int) -> float:
    """Mean of log(p + 1) over the tail query positions p of a window of ``length``."""
    start = tail_start(length)
    return float(np.mean(np.log(np.arange(start, length) + 1.0)))


def tail_start(length: int) -> int:
    return min(length - 1, int(round(length * (1.0 - TAIL_FRACTION))))


@torch.no_grad()
def entropy_at_lengths(model: nn.Module, tokens: Tensor | np.ndarray, lengths: Sequence[int],
                       *, eval_windows: int = 2, errors: str = "raise",
                       keep_queries: bool = False) -> list[EntropyResult]:
    """Attention entropy of ``model`` on ``eval_windows`` non-overlapping windows per length
    (fewer where the stream is shorter; each result's ``n_windows`` is how many).

    Uses the eager backend (which returns the weights), so memory grows as
    n_layers * H * length^2 per window: keep lengths modest (a few thousand). ``errors``:
    ``"raise"`` or ``"note"`` (a UserError from the model, or any ValueError, gives an n/a
    result); lengths past a declared position limit are never run. ``keep_queries``: also
    keep each tail query's entropy (``tail_queries``).
    """
    if errors not in ("raise", "note"):
        raise UserError(f"errors must be 'raise' or 'note', got {errors!r}")
    if isinstance(eval_windows, bool) or not isinstance(eval_windows, int) or eval_windows < 1:
        raise UserError(f"eval_windows must be an integer >= 1, got {eval_windows!r}")
    lengths = validate_lengths(list(lengths), None, len(tokens))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        for length in lengths:
            uniform = uniform_tail_entropy(length)
            skipped = not_served(model, length)
            if skipped is not None:
                out.append(EntropyResult(length, None, None, None, uniform, 0, skipped))
                continue
            count = max(1, min(eval_windows, len(tokens) // length))
            stream = as_token_tensor(tokens, count * length)
            ids = stream.view(count, length).to(device)              # (W, L)
            start = tail_start(length)
            means, tails, queries = [], [], []
            for i in range(count):                                    # one window at a time
                try:
                    _, weights = model(ids[i:i + 1], backend="eager", need_weights=True)
                except ValueError as err:    # a refusal no limit declares (xpos's scales
                    if errors == "raise":    # overflowing float16 under autocast)
                        raise
                    skipped = NotEvaluated.from_error(err)
                    break
                ent = torch.stack([attention_entropy(w[0]) for w in weights])  # (layers, H, L)
                means.append(ent.mean(dim=(1, 2)))                    # (layers,)
                tails.append(ent[:, :, start:].mean(dim=(1, 2)))
                queries += ent[:, :, start:].mean(dim=(0, 1)).tolist() if keep_queries else []
            if skipped is not None:
                out.append(EntropyResult(length, None, None, None, uniform, 0, skipped))
                continue
            per_layer = torch.stack(means).mean(dim=0)
            tail = torch.stack(tails).mean(dim=0)
            out.append(EntropyResult(length, float(per_layer.mean()), float(tail.mean()),
                                     tuple(float(v) for v in per_layer), uniform, count,
                                     tail_queries=tuple(queries) if keep_queries else None))
    finally:
        model.train(was_training)
    return out
