"""Region methods (:mod:`.extension_methods`) on posenc's own RoPE models, by patching the
self-attention layers of any module tree (a ``TransformerLM``, a block, ...).

``apply_region_method(model, SelfExtend(64, 4))`` gives every self-attention layer of ``model``
a forward that keeps raw keys in its KV cache and scores each (query, key) pair under the
method's position map, with the layer encoding's RoPE frequencies; ``remove_region_method``
undoes it. The encoding must be a ``rope`` (any layout or rotary dimension) whose frequencies
do not depend on the length and carry no attention factor. Rows must be unpadded with shared
positions (no key padding, no packed documents). StreamingLLM's outputs are exact here but
posenc's KV cache keeps every key (the Hugging Face patch evicts, see ``posenc.hf.extend``).
"""

from __future__ import annotations

import types

from torch import Tensor, nn

from ..encodings.rope import RotaryEncoding
from ..errors import UserError
from .attention import MultiHeadAttention
from .cache import KVCache
from .context import AttentionContext
from .extension_methods import Method, RotaryTable, blockwise_region_attention


def apply_region_method(model: nn.Module, method: Method) -> list[MultiHeadAttention]:
    """Patch every self-attention layer under ``model``; returns the patched layers."""
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention) and not m.cross]
    if not layers:
        raise UserError(f"{type(model).__name__} has no self-attention layer to patch")
    for layer in layers:
        if hasattr(layer, "_region_method"):
            raise UserError("a region method is already applied; call remove_region_method "
                            "first")
        layer._region_method = method
        layer._region_tables = {}
        layer.forward = types.MethodType(_region_forward, layer)
    return layers


def remove_region_method(model: nn.Module) -> None:
    """Undo :func:`apply_region_method` (layers not patched are left alone)."""
    for m in model.modules():
        if isinstance(m, MultiHeadAttention) and hasattr(m, "_region_method"):
            del m.forward, m._region_method, m._region_tables


def _table(layer: MultiHeadAttention, pe: nn.Module) -> RotaryTable:
    if type(pe) is not RotaryEncoding or pe.length_dependent \
            or getattr(pe, "logn_base_len", None) is not None:
        raise UserError(f"region methods need a rope encoding whose frequencies do not "
                         f"depend on the length (no log-n), got {type(pe).__name__}")
    inv_freq, factor = pe.frequencies(0)
    if factor != 1.0:
        raise UserError(f"region methods take RoPE without an attention factor, got "
                         f"{factor}")
    key = (id(pe), inv_freq.device)
    if key not in layer._region_tables:
        layer._region_tables[key] = RotaryTable(inv_freq, pe.layout)
    return layer._region_tables[key]


def _region_forward(self: MultiHeadAttention, x: Tensor, ctx: AttentionContext,
                    pe: nn.Module, cache: KVCache | None = None
                    ) -> tuple[Tensor, Tensor | None]:
    """x (B, T, C) at ``ctx.pos`` (T,) -> (B, T, C); raw keys join the cache."""
    b, t, c = x.shape
    if ctx.pos.dim() != 1 or ctx.key_valid is not None or ctx.documents is not None \
            or (cache is not None and (cache.padded or cache.per_sample)):
        raise UserError("region methods need unpadded rows sharing positions (no "
                         "attention_mask, per-row positions or packed documents)")
    rotate = _table(self, pe)
    q, k, v = (self.heads(z) for z in self.qkv_proj(x).chunk(3, dim=-1))
    k_pos = ctx.pos
    if cache is not None:
        k, v, k_pos = cache.append(k, v, ctx.pos)
    out = blockwise_region_attention(q, k, v, ctx.pos, k_pos, self._region_method.regions,
                                     rotate, self.head_dim ** -0.5)
    return self.out_proj(out.transpose(1, 2).reshape(b, t, c)), None
