"""A preallocated key/value cache for one attention layer, with the positions it holds."""

from __future__ import annotations

import torch
from torch import Tensor

from ..encodings.base import PositionalEncoding


class KVCache:
    """Keys and values (B, H, capacity, D) plus their positions (capacity,).

    Whether keys are stored before or after the encoding's ``transform_qk`` is the attention
    layer's choice (see ``PositionalEncoding.cache_transformed_keys``); the cache only stores.
    """

    def __init__(self, batch: int, n_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 ) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be >= 1, got {capacity}")
        shape = (batch, n_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.pos = torch.zeros(capacity, dtype=torch.long, device=device)
        self.capacity = capacity
        self.length = 0
        #: whether every position appended so far continued one run p0, p0 + 1, ... (as the
        #: callers promised, see ``note_consecutive``)
        self.consecutive = True
        #: per-sequence state an encoding keeps while decoding (see ``embed``'s ``state``)
        self.extra: dict = {}
        #: what a model keeps to recompute earlier tokens (ids, positions, the encoding's
        #: length signature) when a length-dependent encoding makes the cache stale
        self.replay: dict = {}

    def reset(self) -> None:
        """Forget the cached tokens and the encoding's decode state (buffers are kept)."""
        self.length = 0
        self.consecutive = True
        self.extra = {}

    def note_consecutive(self, consecutive: bool) -> bool:
        """Before an append: whether its positions continue the cached run (the caller's
        promise ``consecutive``, a host value). Returns whether the cached and new positions
        then form one run."""
        self.consecutive = consecutive and (self.length == 0 or self.consecutive)
        return self.consecutive

    def append(self, k: Tensor, v: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Store k, v (B, H, T, D) at positions pos (T,); return all cached (k, v, pos)."""
        t = k.shape[2]
        if self.length + t > self.capacity:
            raise ValueError(f"sequence length {self.length + t} exceeds the KV cache size "
                             f"{self.capacity}; valid lengths are 1..{self.capacity}")
        end = self.length + t
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.pos[self.length:end] = pos
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end], self.pos[:end]


def make_caches(n_layers: int, batch: int, n_heads: int, head_dim: int, capacity: int,
                dtype: torch.dtype, device: torch.device | str) -> list[KVCache]:
    """One cache per layer."""
    return [KVCache(batch, n_heads, head_dim, capacity, dtype, device) for _ in range(n_layers)]


def replay_if_stale(pe: PositionalEncoding, ids: Tensor, pos: Tensor, caches: list[KVCache],
                    seq_len: int | None = None) -> tuple[Tensor, Tensor]:
    """The tokens a model runs through its caches: ids (B, T) / pos (T,), or the whole history.

    A length-dependent encoding (dynamic NTK, LongRoPE) changes how every position is encoded
    when the sequence grows, so the hidden states cached for earlier tokens go stale in every
    layer past the first. When its ``length_signature`` changes, the caches restart and the
    history is returned to be recomputed, so decoding equals a full recompute (past the
    original length, dynamic NTK then recomputes at every step). The model returns only the
    last T positions' outputs. ``seq_len``: 1 + the largest position if the caller knows it
    (positions it built), else it is read from ``pos``.
    """
    if not pe.length_dependent:
        return ids, pos
    signature = pe.length_signature(int(pos.max()) + 1 if seq_len is None else seq_len)
    if signature is None:
        return ids, pos
    first, book = caches[0], caches[0].replay
    if not first.length:
        book.update(signature=signature, ids=ids, pos=pos)
        return ids, pos
    if first.length + ids.shape[1] > first.capacity:
        return ids, pos                          # the cache itself raises, nothing is lost
    all_ids, all_pos = torch.cat([book["ids"], ids], dim=1), torch.cat([book["pos"], pos])
    stale = signature != book["signature"]
    book.update(signature=signature, ids=all_ids, pos=all_pos)
    if not stale:
        return ids, pos
    for cache in caches:
        cache.reset()
    return all_ids, all_pos
