"""A preallocated key/value cache for one attention layer, with the positions it holds, and a
rolling one for a layer with an attention window (it keeps only what the window can see)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..encodings.base import PositionalEncoding
from ..errors import UserError
from .masks import Window


class KVCache:
    """Keys and values (B, H, capacity, D), their positions and which keys are real.

    Positions are kept per sequence (B, capacity) and handed out as (L,) while every append
    gave one row shared by the batch, as (B, L) once one gave a row per sequence; the key
    padding mask (B, capacity) is handed out once an append had padding (else None). Both
    decisions are host flags, never read from the tensors. Whether keys are stored before or
    after the encoding's ``transform_qk`` is the attention layer's choice (see
    ``PositionalEncoding.cache_transformed_keys``); the cache only stores.
    """

    def __init__(self, batch: int, n_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 ) -> None:
        if capacity < 1:
            raise UserError(f"cache capacity must be >= 1, got {capacity}")
        shape = (batch, n_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.pos = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        self.key_valid = torch.ones(batch, capacity, dtype=torch.bool, device=device)
        self.capacity = capacity
        self.length = 0
        #: host flags: some append gave positions per sequence / a key padding mask
        self.per_sample = False
        self.padded = False
        #: the position each sequence continues at (B,): real tokens seen so far unless the
        #: caller gave positions (kept by the model in the first layer's cache)
        self.next_pos = torch.zeros(batch, dtype=torch.long, device=device)
        #: whether every position appended so far continued one run p0, p0 + 1, ... (as the
        #: callers promised, see ``note_consecutive``)
        self.consecutive = True
        #: per-sequence state an encoding keeps while decoding (see ``embed``'s ``state``)
        self.extra: dict = {}
        #: (B, H, capacity, K): the encoding's ``token_terms`` of the cached tokens, allocated
        #: by the first :meth:`append_terms` (None for encodings that read no input)
        self.terms: Tensor | None = None
        #: what a model keeps to recompute earlier tokens (ids, positions, the encoding's
        #: length signature) when a length-dependent encoding makes the cache stale
        self.replay: dict = {}
        #: a model recomputes this cache whenever a length-dependent encoding's frequencies
        #: change (:func:`replay_if_stale`), so keys may be stored transformed
        self.replays = False

    def reset(self) -> None:
        """Forget the cached tokens and the encoding's decode state (buffers are kept)."""
        self.length = 0
        self.consecutive = True
        self.per_sample = self.padded = False
        self.extra = {}

    def note_consecutive(self, consecutive: bool) -> bool:
        """Before an append: whether its positions continue the cached run (the caller's
        promise ``consecutive``, a host value). Returns whether the cached and new positions
        then form one run."""
        self.consecutive = consecutive and (self.length == 0 or self.consecutive)
        return self.consecutive

    def append(self, k: Tensor, v: Tensor, pos: Tensor, key_valid: Tensor | None = None
               ) -> tuple[Tensor, Tensor, Tensor]:
        """Store k, v (B, H, T, D) at positions pos (T,) or (B, T), with ``key_valid``
        (B, T) bool (None: all real); return all cached (k, v, pos). The cached padding
        mask is :meth:`valid`."""
        t = k.shape[2]
        if self.length + t > self.capacity:
            raise UserError(f"sequence length {self.length + t} exceeds the KV cache size "
                             f"{self.capacity}; valid lengths are 1..{self.capacity}")
        end = self.length + t
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.pos[:, self.length:end] = pos
        self.per_sample = self.per_sample or pos.dim() == 2
        self.key_valid[:, self.length:end] = True if key_valid is None else key_valid
        self.padded = self.padded or key_valid is not None
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end], self.positions()

    def append_terms(self, terms: Tensor) -> Tensor:
        """After :meth:`append` of the same T tokens: store their encoding terms (B, H, T, K)
        and return those of every cached token (B, H, L, K)."""
        t, end = terms.shape[2], self.length
        if self.terms is None:
            self.terms = terms.new_zeros(*terms.shape[:2], self.capacity, terms.shape[-1])
        self.terms[:, :, end - t:end] = terms
        return self.terms[:, :, :end]

    def store_keys(self, k: Tensor) -> None:
        """Replace the keys the last :meth:`append` returned by k (B, H, L, D) (an encoding
        that carries its cached keys, ``carry_keys``)."""
        self.k[:, :, :self.length] = k

    def positions(self) -> Tensor:
        """Positions of the cached keys: (L,) or, once given per sequence, (B, L)."""
        return self.pos[:, :self.length] if self.per_sample else self.pos[0, :self.length]

    def valid(self) -> Tensor | None:
        """Which cached keys are real (B, L) bool, or None if no append had padding."""
        return self.key_valid[:, :self.length] if self.padded else None

    def keys_after(self, t: int) -> int:
        """How many keys attention sees once ``t`` more tokens are appended."""
        return self.length + t


class WindowedKVCache(KVCache):
    """A rolling KV cache for a layer with an attention :class:`~posenc.attention.masks.Window`:
    it holds the last ``window.keep`` tokens (B, H, keep, D) only, all a query of that layer
    can see besides the new tokens (sliding: the last size - 1; chunked: at most the size - 1
    earlier tokens of the query's chunk).

    Exact when positions grow by at least one per real token (the positions a model builds):
    a dropped key is then outside every later query's window. ``length`` still counts every
    token appended (the model continues positions from it) and ``capacity`` bounds it, as in
    :class:`KVCache`; :meth:`append` returns the held tokens and the new ones, oldest first,
    and :meth:`positions` / :meth:`valid` describe what it returned last.
    """

    def __init__(self, batch: int, n_heads: int, head_dim: int, capacity: int,
                 window: Window, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(batch, n_heads, head_dim, max(1, min(window.keep, capacity)), dtype,
                         device)
        self.capacity = capacity
        self.window = window
        self.keep = min(window.keep, capacity)
        self.held = 0
        #: how many held tokens the last append returned before its new ones
        self._held_before = 0
        self._seen_pos = self.pos[:, :0]
        self._seen_valid = self.key_valid[:, :0]

    def reset(self) -> None:
        super().reset()
        self.held = self._held_before = 0

    def append(self, k: Tensor, v: Tensor, pos: Tensor, key_valid: Tensor | None = None
               ) -> tuple[Tensor, Tensor, Tensor]:
        """Attend over the held tokens and k, v (B, H, T, D) at pos (T,) or (B, T); keep the
        last ``keep`` of them. Returns (k, v, pos) of the held and new tokens."""
        t, b = k.shape[2], k.shape[0]
        if self.length + t > self.capacity:
            raise UserError(f"sequence length {self.length + t} exceeds the KV cache size "
                             f"{self.capacity}; valid lengths are 1..{self.capacity}")
        held = self.held
        kept = min(self.keep, held + t)
        all_k = self._roll(self.k, k, held, kept)                   # (B, H, held + T, D)
        all_v = self._roll(self.v, v, held, kept)
        self._seen_pos = self._roll(self.pos, pos.expand(b, t), held, kept, dim=1)
        if key_valid is not None and not self.padded:
            # every key before the first padded append is real; until then the validity
            # buffer is neither read nor written (no work per unpadded step)
            self.key_valid[:, :held] = True
        if self.padded or key_valid is not None:
            valid = torch.ones(b, t, dtype=torch.bool, device=k.device) if key_valid is None \
                else key_valid
            self._seen_valid = self._roll(self.key_valid, valid, held, kept, dim=1)
        self.held, self._held_before = kept, held
        self.per_sample = self.per_sample or pos.dim() == 2
        self.padded = self.padded or key_valid is not None
        self.length += t
        return all_k, all_v, self.positions()

    def append_terms(self, terms: Tensor) -> Tensor:
        """After :meth:`append` of the same T tokens: their encoding terms (B, H, T, K); returns
        those of the tokens it returned (B, H, held + T, K) and keeps the last ``held``, so
        the terms stay aligned with the held keys."""
        if self.terms is None:
            self.terms = terms.new_zeros(*terms.shape[:2], self.k.shape[2], terms.shape[-1])
        return self._roll(self.terms, terms, self._held_before, self.held)

    def store_keys(self, k: Tensor) -> None:
        """Replace the keys the last :meth:`append` returned by k (B, H, held + T, D): the
        last ``held`` are kept."""
        self.k[:, :, :self.held] = k[:, :, k.shape[2] - self.held:]

    @staticmethod
    def _roll(buffer: Tensor, new: Tensor, held: int, kept: int, dim: int = 2) -> Tensor:
        """The first ``held`` entries of ``buffer`` along ``dim``, then ``new``; the last
        ``kept`` of them are written to the front of ``buffer``."""
        joined = torch.cat([buffer.narrow(dim, 0, held), new], dim=dim)
        if kept:
            buffer.narrow(dim, 0, kept).copy_(joined.narrow(dim, joined.shape[dim] - kept, kept))
        return joined

    def positions(self) -> Tensor:
        """Positions of the tokens the last append returned: (L,) or (B, L)."""
        return self._seen_pos if self.per_sample else self._seen_pos[0]

    def valid(self) -> Tensor | None:
        """Which tokens the last append returned are real (B, L), or None (no padding)."""
        return self._seen_valid if self.padded else None

    def keys_after(self, t: int) -> int:
        return self.held + t


def make_caches(n_layers: int, batch: int, n_heads: int, head_dim: int, capacity: int,
                dtype: torch.dtype, device: torch.device | str,
                windows: list[Window | None] | None = None) -> list[KVCache]:
    """One cache per layer: a rolling :class:`WindowedKVCache` for a layer whose
    ``windows`` entry is a window, else a :class:`KVCache`."""
    windows = [None] * n_layers if windows is None else windows
    return [KVCache(batch, n_heads, head_dim, capacity, dtype, device) if w is None else
            WindowedKVCache(batch, n_heads, head_dim, capacity, w, dtype, device)
            for w in windows]


def check_caches(caches: object, batch: int, n_heads: int, head_dim: int,
                 windows: list[Window | None]) -> None:
    """UserError in one line, naming the layer, unless ``caches`` is one cache per layer
    (``len(windows)`` of them) as ``make_caches`` builds for this model: each a
    :class:`KVCache`, rolling with the same window where the layer has one and plain where it
    has none, holding ``batch`` sequences of ``n_heads`` heads of ``head_dim``."""
    hint = f"make the caches with this model's make_caches({batch}, capacity)"
    if not isinstance(caches, (list, tuple)):
        raise UserError(f"caches must be a list of one KVCache per layer, got "
                        f"{type(caches).__name__}; {hint}")
    if len(caches) != len(windows):
        raise UserError(f"caches holds {len(caches)} caches but the model has {len(windows)} "
                        f"layers; {hint}")
    for i, (cache, window) in enumerate(zip(caches, windows)):
        if not isinstance(cache, KVCache):
            raise UserError(f"caches[{i}] is a {type(cache).__name__}, not a KVCache; {hint}")
        held = getattr(cache, "window", None)
        if held != window:
            raise UserError(f"caches[{i}] was made for a layer with window {held}, but layer "
                            f"{i} has window {window}; {hint}")
        b, h, _, d = cache.k.shape
        if (b, h, d) != (batch, n_heads, head_dim):
            raise UserError(f"caches[{i}] holds {b} sequences of {h} heads of dim {d}, but "
                            f"layer {i} needs {batch} of {n_heads} of dim {head_dim}; {hint}")


def replay_if_stale(pe: PositionalEncoding | list[PositionalEncoding], ids: Tensor, pos: Tensor,
                    caches: list[KVCache],
                    key_valid: Tensor | None = None, seq_len: int | None = None
                    ) -> tuple[Tensor, Tensor, Tensor | None]:
    """The tokens a model runs through its caches: ids (B, T), pos (T,) or (B, T) and their
    padding mask key_valid (B, T) or None, or the whole history's.

    A length-dependent encoding (dynamic NTK, LongRoPE) changes how every position is encoded
    when the sequence grows, so the hidden states cached for earlier tokens go stale in every
    layer past the first. When its ``length_signature`` changes, the caches restart and the
    history is returned to be recomputed, so decoding equals a full recompute (past the
    original length, dynamic NTK then recomputes at every step). The model returns only the
    last T positions' outputs. ``seq_len``: 1 + the largest position if the caller knows it
    (positions it built), else it is read from ``pos`` (the largest of the batch: one set of
    frequencies serves every sequence). ``pe`` may be a list (the encodings of a model's
    layer plan): the history is then recomputed when any of their signatures changes.
    """
    encodings = [e for e in (pe if isinstance(pe, (list, tuple)) else [pe])
                 if e.length_dependent]
    if not encodings:
        return ids, pos, key_valid
    for cache in caches:
        cache.replays = True
    n = int(pos.max()) + 1 if seq_len is None else seq_len
    signatures = [e.length_signature(n) for e in encodings]
    if all(sig is None for sig in signatures):
        return ids, pos, key_valid
    signature = signatures[0] if len(signatures) == 1 else tuple(signatures)
    first, book = caches[0], caches[0].replay
    if not first.length:
        book.update(signature=signature, ids=ids, pos=pos, valid=key_valid)
        return ids, pos, key_valid
    if first.length + ids.shape[1] > first.capacity:
        return ids, pos, key_valid               # the cache itself raises, nothing is lost
    history = (torch.cat([book["ids"], ids], dim=1), _join(book["pos"], pos),
               _join_valid(book["valid"], key_valid, book["ids"].shape, ids.shape))
    stale = signature != book["signature"]
    book.update(signature=signature, ids=history[0], pos=history[1], valid=history[2])
    if not stale:
        return ids, pos, key_valid
    for cache in caches:
        cache.reset()
    return history


def _join(before: Tensor, after: Tensor) -> Tensor:
    """Positions (L1,) or (B, L1) then (L2,) or (B, L2): (L1 + L2,) if both are shared."""
    if before.dim() == after.dim() == 1:
        return torch.cat([before, after])
    batch = before.shape[0] if before.dim() == 2 else after.shape[0]
    return torch.cat([before.expand(batch, -1), after.expand(batch, -1)], dim=1)


def _join_valid(before: Tensor | None, after: Tensor | None, before_shape, after_shape
                ) -> Tensor | None:
    """Padding masks of two chunks (None: all real): None if both are."""
    if before is None and after is None:
        return None
    fill = [m if m is not None else torch.ones(s, dtype=torch.bool, device=o.device)
            for m, s, o in ((before, before_shape, after), (after, after_shape, before))]
    return torch.cat(fill, dim=1)
