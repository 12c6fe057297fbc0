"""A preallocated key/value cache for one attention layer, with the positions it holds."""

from __future__ import annotations

import torch
from torch import Tensor


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
        #: per-sequence state an encoding keeps while decoding (see ``embed``'s ``state``)
        self.extra: dict = {}
        #: what a model keeps to recompute earlier tokens (ids, positions, the encoding's
        #: length signature) when a length-dependent encoding makes the cache stale
        self.replay: dict = {}

    def reset(self) -> None:
        """Forget the cached tokens and the encoding's decode state (buffers are kept)."""
        self.length = 0
        self.extra = {}

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
