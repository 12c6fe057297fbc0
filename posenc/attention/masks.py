"""Causal visibility from shapes alone.

Queries are the last Lq of the Lk keys (a KV cache holds the earlier ones), so under a causal
mask query i sees keys 0 .. i + Lk - Lq. Masks are built from the two lengths, host values,
never from position values: positions are only what the encodings read, and may restart (packed
documents) or skip (padding) without changing who sees whom.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import UserError


def causal_visible(lq: int, lk: int, device: torch.device | str) -> Tensor:
    """(Lq, Lk) bool: True where key j is visible to query i (j <= i + Lk - Lq)."""
    if lk < lq:
        raise UserError(f"causal attention needs at least as many keys as queries (the "
                         f"queries are the last keys), got {lq} queries and {lk} keys")
    return torch.ones(lq, lk, dtype=torch.bool, device=device).tril(lk - lq)


def causal_additive(lq: int, lk: int, device: torch.device | str,
                    dtype: torch.dtype = torch.float32) -> Tensor:
    """(Lq, Lk): 0 where visible, -inf where hidden (added to logits)."""
    mask = torch.zeros(lq, lk, dtype=dtype, device=device)
    return mask.masked_fill_(~causal_visible(lq, lk, device), float("-inf"))



def visibility(lq: int, lk: int, device: torch.device | str, *, causal: bool,
               key_valid: Tensor | None = None, documents: Tensor | None = None,
               self_attention: bool = True) -> Tensor | None:
    """Which keys each query sees: (B or 1, 1, Lq, Lk) bool, or None when it sees them all.

    ``causal``: key j <= i + Lk - Lq. ``key_valid`` (B, Lk) bool: False for padding, which no
    query sees. ``documents`` (B, Lk) ids (queries: the last Lq of them): a query sees keys of
    its own document only (packed rows). In self-attention a query always sees its own key
    and a padding query sees nothing else, so its row stays finite and reads no real token
    (its output does not depend on where the real tokens stand); real queries are unaffected
    (their own key is visible anyway). Built from shapes and the given masks, never from
    positions.
    """
    visible = causal_visible(lq, lk, device)[None, None] if causal and lq > 1 else None
    if key_valid is not None:
        keys = key_valid[:, None, None, :]                                # (B, 1, 1, Lk)
        if self_attention:
            own = torch.zeros(lq, lk, dtype=torch.bool, device=device)
            own.diagonal(lk - lq).fill_(True)                            # key i + Lk - Lq
            keys = (keys & key_valid[:, None, -lq:, None]) | own         # (B, 1, Lq, Lk)
        visible = keys if visible is None else visible & keys
    if documents is not None:
        same = documents[:, None, -lq:, None] == documents[:, None, None, :]   # (B,1,Lq,Lk)
        visible = same if visible is None else visible & same
    return None if visible is None else visible.expand(-1, -1, lq, lk)


def additive(visible: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """A visibility mask as a logits term: 0 where visible, -inf where hidden."""
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(
        ~visible, float("-inf"))


@dataclass(frozen=True)
class Masks:
    """The padding and document masks of one attention call (None: none of that kind).

    ``key_valid`` (B, Lk) bool: False for padding keys. ``documents`` (B, Lk) ids of the
    documents packed into each row (the queries are the last Lq keys). ``self_attention``:
    queries are among the keys (each sees its own key; see :func:`visibility`).
    """

    key_valid: Tensor | None = None
    documents: Tensor | None = None
    self_attention: bool = True

    def any(self) -> bool:
        return self.key_valid is not None or self.documents is not None

    def visibility(self, lq: int, lk: int, device: torch.device | str, causal: bool
                   ) -> Tensor | None:
        """:func:`visibility` of these masks: (B or 1, 1, Lq, Lk) bool."""
        return visibility(lq, lk, device, causal=causal, key_valid=self.key_valid,
                          documents=self.documents, self_attention=self.self_attention)

