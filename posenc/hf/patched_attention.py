"""The one adapter that gives a Llama-family attention module posenc's forward (used by
:func:`posenc.hf.extend.extend`).

It adds what Hugging Face's attention cannot do: the log-n query temperature, an exact
KV cache that keeps raw keys and rotates all of them with the frequencies of the current length,
and the region methods of :mod:`posenc.methods` (Self-Extend, ReRoPE, Dual Chunk, StreamingLLM,
...: raw keys in the cache, each pair scored in its region; a method that evicts drops what no
later query sees). Everything else (projections, q/k norms, the model family's rotary helper
and attention interface) is the family's own, found through the attention module and its
Python module. The adapter's state lives in one :class:`AttentionAdapter` object bound into the
module's forward; nothing else is stored on transformers' objects.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..attention.extension_methods import RotaryTable, blockwise_region_attention
from ..encodings.context import HookContext
from ..errors import UserError
from ..methods import RegionMethod, list_methods
from .latent_projection import is_latent, latent_qkv, nope_width, rotate_tail


@dataclass
class AttentionAdapter:
    """posenc's state for one patched attention module."""

    enc: nn.Module
    exact_cache: bool
    rotate: Any                  # the model family's apply_rotary_pos_emb(q, k, cos, sin)
    eager: Any                   # the model family's eager_attention_forward
    extra: dict[str, Any]        # extra attention-interface kwargs (Mistral/Qwen2 window)
    method: RegionMethod | None = None  # a region method (then the forward is _region_forward)
    rotary: bool = True          # False: a NoPE layer (region positions do not rotate)
    #: device -> cos/sin of enc by integer position, grown on demand (shared across layers)
    tables: dict[torch.device, RotaryTable] = field(default_factory=dict)
    #: cache layer -> tokens an evicting method dropped from it in the current sequence
    evicted: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)


def adapter_of(attn: nn.Module) -> AttentionAdapter | None:
    """The adapter bound into ``attn``'s forward by :func:`patch_attention`, or None."""
    forward = attn.__dict__.get("forward")
    return forward.args[1] if isinstance(forward, partial) else None


def patch_attention(attn: nn.Module, enc: nn.Module, exact_cache: bool,
                    method: RegionMethod | None = None, rotary: bool = True,
                    tables: dict[torch.device, RotaryTable] | None = None) -> None:
    """Give one Llama-family attention module posenc's forward (log-n and/or exact cache, or
    a region ``method``).

    enc: the posenc ``rope`` encoding whose ``transform_qk`` and ``attn_scale`` it uses (and
    whose frequencies a region method rotates by, unless ``rotary`` is False).
    tables: the region method's cos/sin tables by device; layers given the same dict (and
    the same ``enc``) share them. None: a dict of this layer's own.
    """
    family = sys.modules[type(attn).__module__]
    if is_latent(attn):
        if method is None:
            raise UserError("latent attention (DeepSeek) takes region methods here; log-n "
                            "and an exact cache are not available for it")
        adapter = AttentionAdapter(enc, False, None, None, {}, method, rotary,
                                   {} if tables is None else tables)
        attn.forward = partial(_region_forward, attn, adapter)
        return
    rotate = getattr(family, "apply_rotary_pos_emb", None)
    eager = getattr(family, "eager_attention_forward", None)
    fused = hasattr(attn, "qkv_proj")
    if rotate is None or eager is None or not all(hasattr(attn, n) for n in (
            ("qkv_proj",) if fused else ("q_proj", "k_proj", "v_proj")) + ("o_proj",
                                                                           "head_dim")):
        raise UserError(f"attention {type(attn).__name__} does not have the Llama layout "
                         "posenc patches (q/k/v/o projections, apply_rotary_pos_emb)")
    window = getattr(attn, "sliding_window", getattr(attn.config, "sliding_window", None))
    if method is not None and (window is not None or getattr(
            attn.config, "attn_logit_softcapping", None) is not None):
        raise UserError(f"method {method.name!r} applies to full-attention layers without "
                         "logit soft-capping; this layer has a sliding window or soft-capping")
    extra = {"sliding_window": window} if window is not None else {}
    adapter = AttentionAdapter(enc, exact_cache, rotate, eager, extra, method, rotary,
                               {} if tables is None else tables)
    forward = _attention_forward if method is None else _region_forward
    attn.forward = partial(forward, attn, adapter)


def unpatch_attention(attn: nn.Module) -> None:
    """Undo :func:`patch_attention`: the module's class forward comes back."""
    del attn.forward


def _attention_forward(self: nn.Module, patch: AttentionAdapter, hidden_states: Tensor,
                       position_embeddings: tuple[Tensor, Tensor] | None = None,
                       attention_mask: Tensor | None = None, past_key_values: Any = None,
                       **kwargs: Any) -> tuple[Tensor, Tensor | None]:
    """Llama-family attention with log-n query scaling and/or an exact raw-key cache.

    The KV cache arrives as ``past_key_values`` (transformers 4.x) or ``cache`` (5.x)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    cache = kwargs.pop("cache", None)
    past_key_values = cache if past_key_values is None else past_key_values
    batch, length = hidden_states.shape[:2]
    q, k, v = _project(self, hidden_states)
    pos = kwargs.get("position_ids")
    if pos is None:
        past = past_key_values.get_seq_length(self.layer_idx) if past_key_values is not None \
            else 0
        pos = torch.arange(past, past + length, device=q.device)[None]
    pos = pos.expand(batch, length)                                   # (B, T)
    if patch.exact_cache:
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)   # raw (unrotated) keys
        k_pos = torch.arange(k.shape[2], device=q.device)
        if not bool((pos == k_pos[k_pos.numel() - length:]).all()):
            raise UserError("exact_cache needs positions 0..n-1 for every sequence (no "
                             "padding or custom position_ids)")
        q, k = patch.enc.transform_qk(q, k, HookContext(k_pos[k_pos.numel() - length:], k_pos))
    else:
        cos, sin = position_embeddings
        q, k = patch.rotate(q, k, cos, sin)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)
    scale = patch.enc.attn_scale(HookContext(pos.reshape(-1), pos.reshape(-1), causal=True))
    if scale is not None:
        q = q * scale.view(batch, 1, length, 1).to(q.dtype)          # (B, H, T, D)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                      patch.eager)
    out, weights = interface(self, q, k, v, attention_mask,
                             dropout=0.0 if not self.training else self.attention_dropout,
                             scaling=self.scaling, **patch.extra, **kwargs)
    out = out.reshape(batch, length, -1).contiguous()               # (B, T, H*D)
    return self.o_proj(out), weights


def _project(self: nn.Module, hidden: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q (B, H, T, D), k and v (B, Hkv, T, D) before RoPE: the family's projections (Phi-3's
    fused qkv_proj) and per-head norms (Qwen3, Gemma 3's q_norm / k_norm)."""
    batch, length = hidden.shape[:2]
    shape = (batch, length, -1, self.head_dim)
    if hasattr(self, "qkv_proj"):
        qkv = self.qkv_proj(hidden)
        n_q = self.config.num_attention_heads * self.head_dim
        n_kv = self.config.num_key_value_heads * self.head_dim
        q, k, v = qkv[..., :n_q], qkv[..., n_q:n_q + n_kv], qkv[..., n_q + n_kv:]
    else:
        q, k, v = self.q_proj(hidden), self.k_proj(hidden), self.v_proj(hidden)
    q, k, v = q.view(shape), k.view(shape), v.view(shape)
    if hasattr(self, "q_norm"):
        q, k = self.q_norm(q), self.k_norm(k)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _region_forward(self: nn.Module, patch: AttentionAdapter, hidden_states: Tensor,
                    position_embeddings: tuple[Tensor, Tensor] | None = None,
                    attention_mask: Tensor | None = None, past_key_values: Any = None,
                    **kwargs: Any) -> tuple[Tensor, None]:
    """Attention under a region method: raw keys in the cache, positions from the method.

    Absolute positions are the cache slots, plus the tokens StreamingLLM evicted (counted on
    the adapter by cache layer, and forgotten when the layer starts a new sequence); they must be 0..n-1
    for every sequence (no padding). ``Cache.crop`` keeps the count: it drops the newest
    slots, whose successors' positions then follow the kept ones."""
    method = patch.method
    cache = kwargs.pop("cache", None)
    cache = cache if past_key_values is None else past_key_values
    batch, length = hidden_states.shape[:2]
    latent = is_latent(self)
    if latent:          # DeepSeek: the cache holds the KV latent and the shared rotary key
        q, k, v, layer = latent_qkv(self, hidden_states, cache)
    else:
        q, k, v = _project(self, hidden_states)
        layer = None
    if cache is not None and not latent:   # a cache without a config adds its layers on
        k, v = cache.update(k, v, self.layer_idx)       # the first update; raw keys
        layer = cache.layers[self.layer_idx]
    # tokens evicted by earlier steps of this sequence; none when the cache held nothing
    # before this call (a new layer, or one emptied by Cache.reset() since)
    evicted = patch.evicted.get(layer, 0) if layer is not None and k.shape[2] > length else 0
    slots = torch.arange(k.shape[2], device=q.device)
    sinks = getattr(method, "sinks", 0)
    k_abs = torch.where(slots < sinks, slots, slots + evicted)
    q_abs = k_abs[k_abs.numel() - length:]
    _require_plain_positions(kwargs.get("position_ids"), attention_mask, slots, length,
                             q_abs if not evicted else None)
    if method.evicts:
        def regions_of(qp: Tensor, kp: Tensor) -> list:
            return method.regions(qp, kp, evicted)
    else:
        regions_of = method.regions
    rotate = _table(patch, q.device) if patch.rotary else (lambda x, pos, scale: x)
    if latent and patch.rotary:                        # only the rotary part of each head
        rotate = rotate_tail(rotate, nope_width(self))
    out = blockwise_region_attention(q, k, v, q_abs, k_abs, regions_of, rotate, self.scaling,
                                     rising_runs=method.rising_runs)     # (B, H, T, D)
    if layer is not None and method.evicts:
        keep = method.kept(k.shape[2]).to(k.device)
        patch.evicted[layer] = evicted + k.shape[2] - keep.numel()
        if keep.numel() < k.shape[2]:
            layer.keys, layer.values = layer.keys[:, :, keep], layer.values[:, :, keep]
    if latent:
        out = out[..., :self.v_head_dim]                            # the padding cut off
    out = out.transpose(1, 2).reshape(batch, length, -1).contiguous()  # (B, T, H*D)
    return self.o_proj(out), None


def _table(patch: AttentionAdapter, device: torch.device) -> RotaryTable:
    """The rotary table of ``patch.enc``'s frequencies on ``device`` (made on first use)."""
    table = patch.tables.get(device)
    if table is None:
        table = patch.tables[device] = RotaryTable(patch.enc.frequencies(0)[0].to(device))
    return table


def _require_plain_positions(position_ids: Tensor | None, mask: Tensor | None, slots: Tensor,
                             length: int, q_abs: Tensor | None) -> None:
    """UserError unless positions are 0..n-1 (``q_abs``: the expected query positions, None
    once StreamingLLM has evicted and the model counts slots) and the mask is plain causal."""
    message = (f"region methods ({', '.join(list_methods('region'))}) need positions "
               "0..n-1 for every sequence (no padding or custom position_ids)")
    if q_abs is not None and position_ids is not None and not bool(
            (position_ids == q_abs).all()):
        raise UserError(message)
    if mask is None:
        return
    allowed = mask if mask.dtype == torch.bool else mask == 0
    q_slots = slots[slots.numel() - length:]
    causal = slots[None, :] <= q_slots[:, None]                      # (T, n)
    if allowed.shape[-1] < slots.numel() or not bool(
            (allowed[..., :slots.numel()] == causal).all()):
        raise UserError(message)
