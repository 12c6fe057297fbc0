"""Causal visibility from shapes alone.

Queries are the last Lq of the Lk keys (a KV cache holds the earlier ones), so under a causal
mask query i sees keys 0 .. i + Lk - Lq. Masks are built from the two lengths, host values,
never from position values: positions are only what the encodings read, and may restart (packed
documents) or skip (padding) without changing who sees whom.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_visible(lq: int, lk: int, device: torch.device | str) -> Tensor:
    """(Lq, Lk) bool: True where key j is visible to query i (j <= i + Lk - Lq)."""
    if lk < lq:
        raise ValueError(f"causal attention needs at least as many keys as queries (the "
                         f"queries are the last keys), got {lq} queries and {lk} keys")
    return torch.ones(lq, lk, dtype=torch.bool, device=device).tril(lk - lq)


def causal_additive(lq: int, lk: int, device: torch.device | str,
                    dtype: torch.dtype = torch.float32) -> Tensor:
    """(Lq, Lk): 0 where visible, -inf where hidden (added to logits)."""
    mask = torch.zeros(lq, lk, dtype=dtype, device=device)
    return mask.masked_fill_(~causal_visible(lq, lk, device), float("-inf"))

