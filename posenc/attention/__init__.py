"""Attention layers, backends, their routing and the KV cache."""

from .attention import MultiHeadAttention
from .backends import attend, route
from .cache import KVCache, make_caches
from .routing import BACKENDS, IMPLEMENTATIONS, choose_backend

__all__ = ["BACKENDS", "IMPLEMENTATIONS", "KVCache", "MultiHeadAttention", "attend",
           "choose_backend", "make_caches", "route"]
