"""Attention layers, backends, their routing, the per-forward context and the KV cache."""

from .attention import MultiHeadAttention
from .backends import attend, route
from .cache import KVCache, WindowedKVCache, make_caches
from .context import AttentionCall, AttentionContext
from .masks import Masks, Window, causal_visible, visibility
from .routing import BACKENDS, IMPLEMENTATIONS, RoutingFacts, choose_backend

__all__ = ["BACKENDS", "IMPLEMENTATIONS", "AttentionCall", "AttentionContext", "KVCache",
           "Masks", "MultiHeadAttention", "RoutingFacts", "Window", "WindowedKVCache", "attend",
           "causal_visible", "choose_backend", "make_caches", "route", "visibility"]
