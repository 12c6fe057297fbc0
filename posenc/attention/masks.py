"""Causal visibility from shapes alone, and attention windows.

Queries are the last Lq of the Lk keys (a KV cache holds the earlier ones), so under a causal
mask query i sees keys 0 .. i + Lk - Lq. Masks are built from the two lengths, host values,
never from position values: positions are only what the encodings read, and may restart (packed
documents) or skip (padding) without changing who sees whom.

The one exception is an attention :class:`Window` (sliding or chunked), which counts
positions: a model's positions count each sequence's real tokens (restarting per packed
document), so a window is the same for a row alone and in a padded or packed batch, and chunk
boundaries follow each sequence's own start (as Hugging Face's chunked mask does with its
left-padding offset).
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


WINDOW_KINDS = ("sliding", "chunked")


def check_window_kind(kind: object) -> None:
    """UserError unless ``kind`` is one of :data:`WINDOW_KINDS`."""
    if kind not in WINDOW_KINDS:
        raise UserError(f"window_kind must be one of {', '.join(WINDOW_KINDS)}, got {kind!r}")


@dataclass(frozen=True)
class Window:
    """An attention window over positions, on top of the causal mask.

    ``sliding``: a query at position p sees keys at positions p - size < k (the last ``size``
    tokens, itself included: Beltagy et al. 2020, Longformer, section 3.1; Jiang et al. 2023,
    Mistral 7B, section 2; Gemma 2/3, gpt-oss; Hugging Face's ``sliding_window_overlay``).
    ``chunked``: positions fall into chunks [c * size, (c + 1) * size) and a query sees keys
    of its own chunk only (Meta 2025, Llama 4's chunked local attention; Hugging Face's
    ``chunked_overlay``).

    The window is checked here, once, for every way one is declared (a plan's ``window`` and
    ``window_kind``, the named plans' options, a config read from JSON): :meth:`declare`
    adds the bound a model's ``max_len`` sets. Its rule is one pure function, :meth:`span`,
    which the dense mask (:meth:`visible`), a FlexAttention mask_mod (:meth:`pair_visible`)
    and its block mask (:meth:`may_see`) all read.
    """

    kind: str
    size: int

    def __post_init__(self) -> None:
        check_window_kind(self.kind)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise UserError(f"window must be an integer >= 1 (tokens), got {self.size!r}")

    @classmethod
    def declare(cls, size: object, kind: object = "sliding", max_len: int | None = None
                ) -> Window:
        """The window a config declares: ``size`` tokens (1 .. ``max_len``, the longest
        sequence the model serves) of ``kind``; a one-line UserError otherwise."""
        window = cls(kind, size)
        if max_len is not None and window.size > max_len:
            raise UserError(f"window must be at most max_len={max_len} tokens, got "
                            f"{window.size}")
        return window

    @property
    def keep(self) -> int:
        """How many earlier tokens a query can see at most: what a KV cache must keep."""
        return self.size - 1

    def span(self, q: Tensor) -> tuple[Tensor, Tensor | None]:
        """The rule, elementwise: a query at position ``q`` (any shape) sees the keys at
        positions ``first <= k <= last`` (``last`` None: no bound but the causal mask's).
        Both bounds grow with q, so a block of queries at q_lo..q_hi can see a block of keys
        at k_lo..k_hi only if k_hi >= first(q_lo) and k_lo <= last(q_hi)."""
        if self.kind == "sliding":
            return q - (self.size - 1), None
        first = torch.div(q, self.size, rounding_mode="floor") * self.size
        return first, first + (self.size - 1)

    def pair_visible(self, q: Tensor, k: Tensor) -> Tensor:
        """Elementwise (broadcasting; usable in a FlexAttention mask_mod): whether a key at
        position k is in the window of a query at q (:meth:`span`)."""
        first, last = self.span(q)
        inside = k >= first
        return inside if last is None else inside & (k <= last)

    def visible(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """q_pos (Lq,) or (B, Lq), k_pos (Lk,) or (B, Lk) -> (B|1, 1, Lq, Lk) bool: the pairs
        inside the window (the causal mask is applied separately)."""
        q = (q_pos if q_pos.dim() == 2 else q_pos[None])[:, None, :, None]
        k = (k_pos if k_pos.dim() == 2 else k_pos[None])[:, None, None, :]
        return self.pair_visible(q, k)

    def may_see(self, q_lo: Tensor, q_hi: Tensor, k_lo: Tensor, k_hi: Tensor) -> Tensor:
        """Blocks of queries at positions q_lo..q_hi (nq,) and of keys at k_lo..k_hi (nk,)
        -> (nq, nk) bool: False where no pair of the two blocks is in the window (a block
        mask skips those), from :meth:`span` at the blocks' extremes."""
        first, _ = self.span(q_lo)
        _, last = self.span(q_hi)
        seen = k_hi[None, :] >= first[:, None]
        return seen if last is None else seen & (k_lo[None, :] <= last[:, None])


@dataclass(frozen=True)
class Masks:
    """The padding and document masks of one attention call (None: none of that kind).

    ``key_valid`` (B, Lk) bool: False for padding keys. ``documents`` (B, Lk) ids of the
    documents packed into each row (the queries are the last Lq keys). ``self_attention``:
    queries are among the keys (each sees its own key; see :func:`visibility`). ``window``:
    an attention :class:`Window` over the queries' positions ``q_pos`` (Lq,) or (B, Lq) and
    the keys' ``k_pos`` (Lk,) or (B, Lk), which it then needs.
    """

    key_valid: Tensor | None = None
    documents: Tensor | None = None
    self_attention: bool = True
    window: Window | None = None
    q_pos: Tensor | None = None
    k_pos: Tensor | None = None

    def __post_init__(self) -> None:
        if self.window is not None and (self.q_pos is None or self.k_pos is None):
            raise UserError("an attention window needs the positions of the queries and keys")

    def any(self) -> bool:
        return self.key_valid is not None or self.documents is not None or \
            self.window is not None

    def visibility(self, lq: int, lk: int, device: torch.device | str, causal: bool
                   ) -> Tensor | None:
        """:func:`visibility` of these masks and the window: (B or 1, 1, Lq, Lk) bool."""
        visible = visibility(lq, lk, device, causal=causal, key_valid=self.key_valid,
                             documents=self.documents, self_attention=self.self_attention)
        if self.window is None:
            return visible
        inside = self.window.visible(self.q_pos, self.k_pos)
        if visible is None:
            return inside.expand(-1, -1, lq, lk)
        return visible & inside

