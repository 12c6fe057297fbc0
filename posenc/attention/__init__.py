"""Attention layers, backends, their routing and the KV cache."""

from .attention import MultiHeadAttention
from .backends import attend, route
from .cache import KVCache, make_caches
from .masks import Masks, causal_visible, visibility
from .routing import BACKENDS, IMPLEMENTATIONS, choose_backend

__all__ = ["BACKENDS", "IMPLEMENTATIONS", "KVCache", "Masks", "MultiHeadAttention", "attend",
           "causal_visible", "choose_backend", "make_caches", "route", "visibility"]
