"""Attention layers, backends and the KV cache."""

from .attention import MultiHeadAttention
from .backends import BACKENDS, attend, choose_backend
from .cache import KVCache, make_caches

__all__ = ["BACKENDS", "KVCache", "MultiHeadAttention", "attend", "choose_backend",
           "make_caches"]
