"""Multi-head latent attention with decoupled RoPE (DeepSeek-AI 2024, "DeepSeek-V2: A Strong,
Economical, and Efficient Mixture-of-Experts Language Model", Sec. 2.1.2-2.1.3; as in
DeepSeek-V3 and transformers' ``DeepseekV3Attention``).

Keys and values come from one compressed latent per token, c = RMSNorm(W_a x) of
``kv_lora_rank`` dims; each head's key is [k_nope ; k_rope] and its query [q_nope ; q_rope]:
the no-rotary parts (``qk_nope_head_dim``) from the latent (keys) and from x (queries,
optionally through a ``q_lora_rank`` bottleneck), the rotary parts (``qk_rope_head_dim``) from
x, the rotary *key* one vector per token shared by every head. The encoding's
``transform_qk`` rotates only the rotary parts, so a position never touches the latent, and
the KV cache holds what DeepSeek's holds: the latent and the shared rotary key per token
(``kv_lora_rank + qk_rope_head_dim`` numbers instead of 2 x heads x head_dim), here raw
(the keys are rotated again for every step, as for a length-dependent encoding; exact for
any rotary). Values are ``v_head_dim`` wide.

The softmax scale is 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), times DeepSeek's
``yarn_mscale(factor, mscale_all_dim) ** 2`` under a YaRN scaling that sets
``mscale_all_dim`` (:func:`~posenc.encodings.rope_scaling.softmax_mscale`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..encodings.base import PositionalEncoding
from ..encodings.checks import require_known_keys, require_positive_int
from ..encodings.rope_scaling import softmax_mscale
from ..errors import UserError
from .cache import KVCache
from .context import AttentionContext
from .masks import visibility

#: the hooks an encoding may implement to run inside latent attention (a bias, a value term
#: or input-dependent terms would need the full per-head keys the latent replaces)
LATENT_HOOKS = ("embed", "transform_qk")


@dataclass(frozen=True)
class LatentShape:
    """The dimensions of multi-head latent attention (DeepSeek-V3's names).

    kv_lora_rank: the KV latent's width; q_lora_rank: the query bottleneck (None: a direct
    projection); qk_nope_head_dim / qk_rope_head_dim: each head's no-rotary and rotary
    query/key parts; v_head_dim: each head's value width.
    """

    kv_lora_rank: int = 32
    qk_rope_head_dim: int = 16
    qk_nope_head_dim: int = 32
    v_head_dim: int = 32
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            require_positive_int(name, getattr(self, name))
        if self.q_lora_rank is not None:
            require_positive_int("q_lora_rank", self.q_lora_rank)
        if self.qk_rope_head_dim % 2:
            raise UserError(f"qk_rope_head_dim must be even (rotary pairs), got "
                            f"{self.qk_rope_head_dim}")

    @classmethod
    def from_dict(cls, data: Any) -> LatentShape:
        """The shape a mapping of these fields gives (UserError naming unknown keys)."""
        if isinstance(data, LatentShape):
            return data
        data = require_known_keys("mla", data, asdict(cls()).keys())
        return cls(**data)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_dim(self) -> int:
        """What the cache keeps per token: the latent and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


def check_latent_encoding(pe_class: type[PositionalEncoding]) -> None:
    """UserError unless an encoding of ``pe_class`` can run inside latent attention."""
    extra = [h for h in pe_class.hook_kinds() if h not in LATENT_HOOKS]
    if extra:
        raise UserError(f"encoding {pe_class.name!r} implements {', '.join(extra)}; latent "
                        f"attention (mla) takes encodings with only {', '.join(LATENT_HOOKS)} "
                        "(rope and its scalings, nope, absolute encodings)")


def make_latent_cache(batch: int, shape: LatentShape, capacity: int, dtype: torch.dtype,
                      device: torch.device | str) -> KVCache:
    """A :class:`KVCache` for one latent attention layer: "keys" (B, 1, capacity,
    kv_lora_rank + qk_rope_head_dim) hold [latent ; raw rotary key], "values" nothing."""
    cache = KVCache(batch, 1, shape.cache_dim, capacity, dtype, device)
    cache.v = cache.v[..., :0]                      # (B, 1, capacity, 0)
    return cache


class LatentAttention(nn.Module):
    """Causal multi-head latent attention: x (B, T, C) -> (B, T, C) (module docstring).

    Parameters keep DeepSeek-V3's names (``q_proj`` or ``q_a_proj``/``q_a_norm``/``q_b_proj``,
    ``kv_a_proj`` = ``kv_a_proj_with_mqa``, ``kv_a_norm``, ``kv_b_proj``; ``out_proj`` =
    ``o_proj``), so weights map one to one.
    """

    def __init__(self, d_model: int, n_heads: int, shape: LatentShape, *, bias: bool = False,
                 dropout: float = 0.0, norm_eps: float = 1e-6) -> None:
        super().__init__()
        self.n_heads, self.shape, self.dropout = n_heads, shape, dropout
        s = shape
        if s.q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, n_heads * s.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(d_model, s.q_lora_rank, bias=bias)
            self.q_a_norm = nn.RMSNorm(s.q_lora_rank, eps=norm_eps)
            self.q_b_proj = nn.Linear(s.q_lora_rank, n_heads * s.qk_head_dim, bias=False)
        self.kv_a_proj = nn.Linear(d_model, s.kv_lora_rank + s.qk_rope_head_dim, bias=bias)
        self.kv_a_norm = nn.RMSNorm(s.kv_lora_rank, eps=norm_eps)
        self.kv_b_proj = nn.Linear(s.kv_lora_rank, n_heads * (s.qk_nope_head_dim +
                                                              s.v_head_dim), bias=False)
        self.out_proj = nn.Linear(n_heads * s.v_head_dim, d_model, bias=bias)

    def _queries(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, H, T, Dn + Dr)."""
        b, t, _ = x.shape
        q = self.q_proj(x) if self.shape.q_lora_rank is None else \
            self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))
        return q.view(b, t, self.n_heads, self.shape.qk_head_dim).transpose(1, 2)

    def forward(self, x: Tensor, ctx: AttentionContext, pe: PositionalEncoding,
                cache: KVCache | None = None) -> tuple[Tensor, None]:
        """x (B, T, C) at ``ctx.pos`` -> (B, T, C), and None (no weights are returned).

        With a ``cache`` (:func:`make_latent_cache`) the new latents and raw rotary keys are
        appended and attention runs over all cached tokens (the queries are the last T)."""
        s, (b, t, _) = self.shape, x.shape
        if ctx.documents is not None and cache is not None:
            raise UserError("documents (packed rows) cannot be combined with a KV cache")
        q_nope, q_rope = self._queries(x).split([s.qk_nope_head_dim, s.qk_rope_head_dim], -1)
        latent, k_rope = self.kv_a_proj(x).split([s.kv_lora_rank, s.qk_rope_head_dim], -1)
        held = torch.cat((self.kv_a_norm(latent), k_rope), -1)[:, None]   # (B, 1, T, R + Dr)
        consecutive = ctx.consecutive
        if cache is None:
            k_pos, key_valid = ctx.pos, ctx.key_valid
        else:
            consecutive = cache.note_consecutive(ctx.consecutive)
            held, _, k_pos = cache.append(held, held[..., :0], ctx.pos, ctx.key_valid)
            key_valid = cache.valid()
        latent, k_rope = held.split([s.kv_lora_rank, s.qk_rope_head_dim], -1)
        at = ctx.hook_context(k_pos, consecutive, "sdpa")
        q_rope, k_rope = pe.transform_qk(q_rope, k_rope, at)          # k_rope (B, 1, L, Dr)
        n = latent.shape[2]
        kv = self.kv_b_proj(latent[:, 0]).view(b, n, self.n_heads, -1).transpose(1, 2)
        k_nope, v = kv.split([s.qk_nope_head_dim, s.v_head_dim], -1)  # (B, H, L, Dn), Dv
        q = torch.cat((q_nope, q_rope), -1)                                # (B, H, T, Dn+Dr)
        k = torch.cat((k_nope, k_rope.expand(-1, self.n_heads, -1, -1)), -1)
        scale = pe.attn_scale(at)                                          # log-n, or None
        if scale is not None:
            q = q * scale.view(-1, 1, t, 1).to(q.dtype)
        visible = visibility(t, n, x.device, causal=ctx.causal, key_valid=key_valid,
                             documents=ctx.documents)
        width = max(s.qk_head_dim, s.v_head_dim)     # one head size for the fused kernels
        q, k = (F.pad(z, (width - z.shape[-1], 0)) for z in (q, k))
        out = F.scaled_dot_product_attention(
            q, k, F.pad(v, (0, width - s.v_head_dim)), attn_mask=visible,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=visible is None and ctx.causal and t > 1 and t == n,
            scale=softmax_mscale(getattr(pe, "scaling", None)) / math.sqrt(s.qk_head_dim))
        out = out[..., :s.v_head_dim].transpose(1, 2).reshape(b, t, -1)   # (B, T, H*Dv)
        return self.out_proj(out), None
