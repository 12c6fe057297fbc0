"""Multi-head attention that asks the positional encoding, never its name, what to do."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..encodings.base import PositionalEncoding
from ..encodings.checks import require_divides
from ..encodings.context import HookContext
from ..errors import UserError
from .backends import attend, route
from .cache import KVCache
from .context import AttentionCall, AttentionContext
from .masks import Masks, Window
from .region_forward import region_self_attention
from .stick_breaking import ATTN_FORMS, stick_breaking_attend


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with hook calls in the order of the data flow.

    q, k, v projections -> ``transform_qk`` -> (cache) -> scores + bias, scaled -> softmax ->
    values (+ value term) -> output projection. Self-attention hands an encoding that reads
    its input the ``token_terms`` of every key (``HookContext.key_terms``), cached with them.

    ``window``: self-attention sees only the keys in this :class:`Window` (sliding or
    chunked); ``sinks``: a learned sink logit per head joins each query's softmax
    denominator (a virtual key with a zero value: OpenAI 2025, gpt-oss-120b & gpt-oss-20b
    model card; a learned form of the attention sinks of Xiao et al. 2024, ICLR), initially
    0. ``form``: "softmax", or "stick_breaking" (self-attention only; it replaces the
    softmax: :mod:`~.stick_breaking`).

    ``method``: a region method (:mod:`posenc.methods.regions`) the layer scores its
    self-attention under, or None; set by :func:`~.region_patch.apply_region_method`. The
    layer asks it for the position map as it asks its encoding for the rest.
    """

    def __init__(self, d_model: int, n_heads: int, *, bias: bool = False,
                 dropout: float = 0.0, cross: bool = False, window: Window | None = None,
                 sinks: bool = False, form: str = "softmax") -> None:
        super().__init__()
        require_divides(n_heads, d_model)
        if window is not None and cross:
            raise UserError("an attention window applies to self-attention only")
        if form not in ATTN_FORMS:
            raise UserError(f"unknown attention form {form!r}; valid: {', '.join(ATTN_FORMS)}")
        if form != "softmax" and cross:
            raise UserError(f"attention form {form!r} applies to causal self-attention only")
        self.form = form
        self.window = window
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if sinks else None
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.cross = cross
        if cross:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout
        self.method = None               # a region method, or None (class docstring)
        #: (encoding id, device) -> RotaryTable of the encoding's frequencies, for ``method``
        self.rotary_tables: dict = {}

    def heads(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, H, T, D)."""
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor, ctx: AttentionContext, pe: PositionalEncoding,
                cache: KVCache | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, T, C) at ``ctx.pos`` -> (B, T, C) and optional weights (B, H, T, Lk).

        ``ctx``: what every layer of this forward shares (positions, masks, causal, layout
        hint, requested backend; cross-attention reads ``ctx.memory``). ``pe``: this layer's
        encoding. With a ``cache``, new keys/values are appended and attention runs over all
        cached ones (the queries are the last T keys); a cross-attention cache keeps the
        memory's keys/values after its first use.
        """
        length = ctx.pos.shape[-1]                 # one token per position of the context
        if x.dim() != 3 or x.shape[1] != length or x.shape[-1] != self.n_heads * self.head_dim:
            raise UserError(f"x must be (batch, length={length}, d_model="
                             f"{self.n_heads * self.head_dim}), got shape {tuple(x.shape)}")
        b, t, c = x.shape
        if ctx.documents is not None and cache is not None:
            raise UserError("documents (packed rows) cannot be combined with a KV cache")
        if self.method is not None and not self.cross:
            if self.form != "softmax":
                raise UserError(f"a region method cannot run with attention form "
                                 f"{self.form!r}")
            return region_self_attention(self, x, ctx, pe, cache), None
        dropout = self.dropout if self.training else 0.0
        attend_qkv = self._cross if self.cross else self._self
        q, k, v, call = attend_qkv(x, ctx, pe, cache, dropout)
        if self.form == "stick_breaking":
            out, weights = stick_breaking_attend(q, k, v, pe, call)
        else:
            out, weights = attend(q, k, v, pe, call)
        if cache is not None and not self.cross and type(pe).overrides("carry_keys"):
            cache.store_keys(pe.carry_keys(k, call.at))      # keys the next call meets
        out = out.transpose(1, 2).reshape(b, t, c)                 # (B, T, C)
        return self.out_proj(out), weights

    def _cross(self, x: Tensor, ctx: AttentionContext, pe: PositionalEncoding,
               cache: KVCache | None, dropout: float
               ) -> tuple[Tensor, Tensor, Tensor, AttentionCall]:
        """Queries from x, keys and values from ``ctx.memory`` (or the cache holding them)."""
        q = self.heads(self.q_proj(x))
        if cache is not None and cache.length:                    # encoder memory cached
            k, v, k_pos = (cache.k[:, :, :cache.length], cache.v[:, :, :cache.length],
                           cache.positions())
            memory_valid = cache.valid()
        else:
            if ctx.memory is None:
                raise UserError("cross-attention needs the memory it reads (the context's "
                                 "memory, memory_pos)")
            k, v = (self.heads(z) for z in self.kv_proj(ctx.memory).chunk(2, dim=-1))
            k_pos, memory_valid = ctx.memory_pos, ctx.memory_valid
            if cache is not None:
                k, v, k_pos = cache.append(k, v, k_pos, memory_valid)
        request = AttentionCall(HookContext(ctx.pos, k_pos), ctx.backend, False, dropout,
                                sinks=self.sinks)
        implementation = route(pe, q, k, v, request)
        at = HookContext(ctx.pos, k_pos, False, ctx.consecutive, implementation)
        masks = Masks(key_valid=memory_valid, self_attention=False)
        return q, k, v, AttentionCall(at, ctx.backend, False, dropout, masks, self.sinks)

    def _self(self, x: Tensor, ctx: AttentionContext, pe: PositionalEncoding,
              cache: KVCache | None, dropout: float
              ) -> tuple[Tensor, Tensor, Tensor, AttentionCall]:
        """Queries, keys and values from x; the keys join the cache's. ``ctx.consecutive``:
        the model built ``ctx.pos`` as a run continuing the cache, so the hooks may use
        strided views instead of gathers."""
        t, pos = x.shape[1], ctx.pos
        q, k, v = (self.heads(z) for z in self.qkv_proj(x).chunk(3, dim=-1))
        request = AttentionCall(HookContext(pos, pos), ctx.backend, ctx.need_weights, dropout,
                                sinks=self.sinks)
        implementation = route(pe, q, k, v, request,
                               k_len=cache.keys_after(t) if cache else t)
        consecutive = ctx.consecutive if cache is None else \
            cache.note_consecutive(ctx.consecutive)

        def keys_at(k_pos: Tensor) -> HookContext:
            return ctx.hook_context(k_pos, consecutive, implementation)

        key_terms = pe.token_terms(x)                 # (B, H, T, K) or None
        if cache is None:
            k_pos, key_valid = pos, ctx.key_valid
            q, k = pe.transform_qk(q, k, keys_at(pos))
        else:
            # a length-dependent transform may be cached when the model recomputes the
            # cache as soon as it changes (KVCache.replays)
            if pe.cache_transformed_keys or (cache.replays and pe.length_dependent):
                q, k = pe.transform_qk(q, k, keys_at(pos))
                k, v, k_pos = cache.append(k, v, pos, ctx.key_valid)
            else:                                                  # re-transform all keys
                k_raw, v, k_pos = cache.append(k, v, pos, ctx.key_valid)
                q, k = pe.transform_qk(q, k_raw, keys_at(k_pos))
            key_valid = cache.valid()
            if key_terms is not None:                 # those of every cached key
                key_terms = cache.append_terms(key_terms)
        if ctx.causal and k.shape[2] < t:
            raise UserError(f"causal attention with {t} queries over {k.shape[2]} keys")
        q_win = k_win = None                     # the positions a window counts
        if self.window is not None:
            q_win = ctx.pos if ctx.window_pos is None else ctx.window_pos
            k_win = k_pos if cache is not None else q_win
        masks = Masks(key_valid=key_valid, documents=ctx.documents, window=self.window,
                      q_pos=q_win, k_pos=k_win)
        at = keys_at(k_pos).with_key_terms(key_terms)
        if cache is not None and type(pe).overrides("carry_keys"):
            at = at.with_carried_keys()             # the cache keeps what carry_keys gave
        return q, k, v, AttentionCall(at, ctx.backend, ctx.need_weights, dropout, masks,
                                      self.sinks)
