"""Next-token selection shared by every generating model."""

from __future__ import annotations

import torch
from torch import Tensor

from ..encodings.base import require_float_in


def select_next(logits: Tensor, temperature: float = 0.0, top_k: int | None = None,
                generator: torch.Generator | None = None, *,
                top_p: float | None = None) -> Tensor:
    """Pick the next token from logits (B, V): greedy at temperature 0 -> (B, 1) long."""
    require_float_in("temperature", temperature, 0.0, float("inf"), low_open=False)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                              or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
    if temperature == 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
