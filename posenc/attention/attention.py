"""Multi-head attention that asks the positional encoding, never its name, what to do."""

from __future__ import annotations

from torch import Tensor, nn

from ..errors import UserError
from ..encodings.base import PositionalEncoding
from ..encodings.checks import check_positions, require_divides
from .backends import attend, route
from .cache import KVCache
from .masks import Masks


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with hook calls in the order of the data flow.

    q, k, v projections -> ``transform_qk`` -> (cache) -> scores + bias, scaled -> softmax ->
    values (+ value term) -> output projection.
    """

    def __init__(self, d_model: int, n_heads: int, *, bias: bool = False,
                 dropout: float = 0.0, cross: bool = False) -> None:
        super().__init__()
        require_divides(n_heads, d_model)
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.cross = cross
        if cross:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout

    def heads(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, H, T, D)."""
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor, pos: Tensor, pe: PositionalEncoding, *, causal: bool,
                cache: KVCache | None = None, memory: Tensor | None = None,
                memory_pos: Tensor | None = None, backend: str = "auto",
                need_weights: bool = False, consecutive: bool = False,
                key_valid: Tensor | None = None, documents: Tensor | None = None,
                memory_valid: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """x (B, T, C), pos (T,) or (B, T). Cross-attention reads ``memory`` (B, S, C) at
        memory_pos.

        With a cache, new keys/values are appended and attention runs over all cached ones
        (the queries are the last T keys). ``consecutive``: the caller built ``pos`` (and
        ``memory_pos``) as runs p0, p0 + 1, ... continuing the cache; the hooks may then use
        strided views instead of gathers. ``key_valid`` (B, T) bool: False for padding
        tokens, which no query sees (kept in the cache); ``documents`` (B, T): ids of the
        documents packed into each row (no cache); ``memory_valid`` (B, S): the memory's
        padding, for cross-attention. Returns (B, T, C) and optional weights (B, H, T, Lk).
        """
        if x.dim() != 3 or x.shape[-1] != self.n_heads * self.head_dim:
            raise UserError(f"x must be (batch, length, d_model={self.n_heads * self.head_dim})"
                             f", got shape {tuple(x.shape)}")
        b, t, c = x.shape
        check_positions("pos", pos, t, b)
        dropout = self.dropout if self.training else 0.0
        if documents is not None and cache is not None:
            raise UserError("documents (packed rows) cannot be combined with a KV cache")
        if self.cross:
            q = self.heads(self.q_proj(x))
            if cache is not None and cache.length:                # encoder memory cached
                k, v, k_pos = (cache.k[:, :, :cache.length], cache.v[:, :, :cache.length],
                               cache.positions())
                memory_valid = cache.valid()
            else:
                k, v = (self.heads(z) for z in self.kv_proj(memory).chunk(2, dim=-1))
                k_pos = memory_pos
                if cache is not None:
                    k, v, k_pos = cache.append(k, v, memory_pos, memory_valid)
            masks = Masks(key_valid=memory_valid, self_attention=False)
            implementation = route(pe, q, k, v, requested=backend, need_weights=need_weights,
                                   dropout=dropout)
        else:
            q, k, v = (self.heads(z) for z in self.qkv_proj(x).chunk(3, dim=-1))
            implementation = route(pe, q, k, v, requested=backend, need_weights=need_weights,
                                   dropout=dropout, k_len=t + (cache.length if cache else 0))
            hints = {"backend": implementation}
            if cache is None:
                q, k = pe.transform_qk(q, k, pos, pos, consecutive=consecutive, **hints)
                k_pos = pos
            else:
                consecutive = cache.note_consecutive(consecutive)
                # a length-dependent transform may be cached when the model recomputes the
                # cache as soon as it changes (KVCache.replays)
                if pe.cache_transformed_keys or (cache.replays and pe.length_dependent):
                    q, k = pe.transform_qk(q, k, pos, pos, consecutive=consecutive, **hints)
                    k, v, k_pos = cache.append(k, v, pos, key_valid)
                else:                                              # re-transform all keys
                    k_raw, v, k_pos = cache.append(k, v, pos, key_valid)
                    q, k = pe.transform_qk(q, k_raw, pos, k_pos, consecutive=consecutive,
                                           **hints)
                key_valid = cache.valid()
            if causal and k.shape[2] < t:
                raise UserError(f"causal attention with {t} queries over {k.shape[2]} keys")
            masks = Masks(key_valid=key_valid, documents=documents)
        out, weights = attend(q, k, v, pe, pos, k_pos, causal=causal, dropout=dropout,
                              need_weights=need_weights, consecutive=consecutive,
                              masks=masks, implementation=implementation)
        out = out.transpose(1, 2).reshape(b, t, c)                 # (B, T, C)
        return self.out_proj(out), weights
