"""The attention forward that :func:`posenc.hf.extend.extend` patches into Llama-family models.

It adds what Hugging Face's attention cannot do: the log-n query temperature, and an exact
KV cache that keeps raw keys and rotates all of them with the frequencies of the current length.
Everything else (projections, the model family's rotary helper and attention interface) is the
family's own, found through the attention module's Python module.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..encodings.context import HookContext
from ..errors import UserError


@dataclass
class _AttentionPatch:
    enc: nn.Module
    exact_cache: bool
    rotate: Any                  # the model family's apply_rotary_pos_emb(q, k, cos, sin)
    eager: Any                   # the model family's eager_attention_forward
    extra: dict[str, Any]        # extra attention-interface kwargs (Mistral/Qwen2 window)


def patch_attention(attn: nn.Module, enc: nn.Module, exact_cache: bool) -> None:
    """Give one Llama-family attention module posenc's forward (log-n and/or exact cache).

    enc: the posenc ``rope`` encoding whose ``transform_qk`` and ``attn_scale`` it uses.
    """
    family = sys.modules[type(attn).__module__]
    rotate = getattr(family, "apply_rotary_pos_emb", None)
    eager = getattr(family, "eager_attention_forward", None)
    if rotate is None or eager is None or not all(
            hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim")):
        raise UserError(f"attention {type(attn).__name__} does not have the Llama layout "
                         "posenc patches (q/k/v/o projections, apply_rotary_pos_emb)")
    window = getattr(attn, "sliding_window", getattr(attn.config, "sliding_window", None))
    extra = {"sliding_window": window} if window is not None else {}
    attn._posenc_attention = _AttentionPatch(enc, exact_cache, rotate, eager, extra)
    attn.forward = types.MethodType(_attention_forward, attn)


def unpatch_attention(attn: nn.Module) -> None:
    """Undo :func:`patch_attention`: the module's class forward comes back."""
    del attn.forward
    del attn._posenc_attention


def _attention_forward(self: nn.Module, hidden_states: Tensor,
                       position_embeddings: tuple[Tensor, Tensor] | None = None,
                       attention_mask: Tensor | None = None, past_key_values: Any = None,
                       **kwargs: Any) -> tuple[Tensor, Tensor | None]:
    """Llama-family attention with log-n query scaling and/or an exact raw-key cache.

    The KV cache arrives as ``past_key_values`` (transformers 4.x) or ``cache`` (5.x)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    patch: _AttentionPatch = self._posenc_attention
    cache = kwargs.pop("cache", None)
    past_key_values = cache if past_key_values is None else past_key_values
    batch, length = hidden_states.shape[:2]
    shape = (batch, length, -1, self.head_dim)
    q = self.q_proj(hidden_states).view(shape).transpose(1, 2)      # (B, H, T, D)
    k = self.k_proj(hidden_states).view(shape).transpose(1, 2)      # (B, Hkv, T, D)
    v = self.v_proj(hidden_states).view(shape).transpose(1, 2)      # (B, Hkv, T, D)
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
