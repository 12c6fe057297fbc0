"""Queries, keys and values of a Hugging Face multi-head latent attention module (DeepSeek-V2
and V3: DeepSeek-AI 2024, "DeepSeek-V2", Sec. 2.1.2-2.1.3) for posenc's region forward
(:mod:`posenc.hf.patched_attention`), with the rotary left to the region method.

Each head's query and key are a no-rotary part (``qk_nope_head_dim``) and a rotary part
(``qk_rope_head_dim``); the rotary key is one vector per token shared by every head. The cache
holds what DeepSeek's own attention holds, the normalized KV latent (``kv_lora_rank``) and the
shared rotary key, here raw (unrotated), so a region method rotates it by the position it
chooses. DeepSeek's interleaved rotary pairs (``rope_interleave``) are put in the "half"
layout first (the same permutation for queries and keys leaves every dot product unchanged).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def is_latent(attn: nn.Module) -> bool:
    """Whether ``attn`` is a multi-head latent attention module (DeepSeek's layout)."""
    return hasattr(attn, "kv_a_proj_with_mqa") and hasattr(attn, "kv_b_proj")


def _half_layout(x: Tensor) -> Tensor:
    """Interleaved pairs (x0, x1), (x2, x3), ... -> (x0, x2, ..., x1, x3, ...)."""
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)


def latent_qkv(attn: nn.Module, hidden: Tensor, cache: Any
               ) -> tuple[Tensor, Tensor, Tensor, Any]:
    """q (B, H, T, D), k (B, H, L, D) and v (B, H, L, D) before any rotary, D = max(Dn + Dr,
    Dv) (q and k zero-padded in front, the rotary part last in the half layout; v
    zero-padded after its Dv), over the cached tokens and these T; and the cache layer
    (None without a cache). ``cache.update`` gets the latent (B, 1, T, R) and
    the raw shared rotary key (B, 1, T, Dr)."""
    batch, length = hidden.shape[:2]
    if attn.q_lora_rank is None:
        q = attn.q_proj(hidden)
    else:
        q = attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(hidden)))
    q = q.view(batch, length, -1, attn.qk_head_dim).transpose(1, 2)     # (B, H, T, Dn + Dr)
    q_pass, q_rot = torch.split(q, [attn.qk_nope_head_dim, attn.qk_rope_head_dim], dim=-1)
    latent, k_rot = torch.split(attn.kv_a_proj_with_mqa(hidden),
                                [attn.kv_lora_rank, attn.qk_rope_head_dim], dim=-1)
    latent = attn.kv_a_layernorm(latent).view(batch, 1, length, attn.kv_lora_rank)
    k_rot = k_rot.view(batch, 1, length, attn.qk_rope_head_dim)        # (B, 1, T, Dr)
    if attn.config.rope_interleave:
        q_rot, k_rot = _half_layout(q_rot), _half_layout(k_rot)
    layer = None
    if cache is not None:
        latent, k_rot = cache.update(latent, k_rot, attn.layer_idx)
        layer = cache.layers[attn.layer_idx]
    k, v = attn.expand_kv(latent, k_rot)               # (B, H, L, Dn + Dr), (B, H, L, Dv)
    q = torch.cat((q_pass, q_rot), dim=-1)
    # fused attention wants one head size: zeros widen the narrower side (q and k in front,
    # where they add nothing to a score; v at the end, cut off by the caller)
    width = max(q.shape[-1], v.shape[-1])
    q, k = (F.pad(x, (width - x.shape[-1], 0)) for x in (q, k))
    return q, k, F.pad(v, (0, width - v.shape[-1])), layer


def nope_width(attn: nn.Module) -> int:
    """The dimensions in front of the rotary part of :func:`latent_qkv`'s q and k."""
    return max(attn.qk_head_dim, attn.v_head_dim) - attn.qk_rope_head_dim


def rotate_tail(rotate: Any, nope_dim: int):
    """``rotate(x, pos, scale)`` applied to the last dimensions of x after ``nope_dim``
    (the rotary part of a latent attention head); the first ``nope_dim`` are left alone."""
    def rotate_part(x: Tensor, pos: Tensor, scale: float = 1.0) -> Tensor:
        return torch.cat((x[..., :nope_dim], rotate(x[..., nope_dim:], pos, scale)), dim=-1)
    return rotate_part
