"""Region methods (:mod:`.extension_methods`) on posenc's own RoPE models, by patching the
self-attention layers of any module tree (a ``TransformerLM``, a block, ...).

``apply_region_method(model, SelfExtend(64, 4))`` gives every self-attention layer of ``model``
a forward that keeps raw keys in its KV cache and scores each (query, key) pair under the
method's position map, with the layer encoding's RoPE frequencies; ``remove_region_method``
undoes it. The encoding must be a ``rope`` (any layout, rotary dimension or p-RoPE fraction)
whose frequencies do not depend on the length, with no attention factor and no logits factor
of the query's position (:func:`region_ready`); the layers have no window and no attention
sinks. Rows must be unpadded with shared positions (no key padding, no packed documents).
StreamingLLM's outputs are exact here but posenc's KV cache keeps every key (the Hugging Face
patch evicts, see ``posenc.hf.extend``).
"""

from __future__ import annotations

import types

from torch import Tensor, nn

from ..encodings.base import PositionalEncoding
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
    for layer in layers:                      # every layer is checked before any is patched
        if hasattr(layer, "_region_method"):
            raise UserError("a region method is already applied; call remove_region_method "
                            "first")
        if layer.window is not None or layer.sinks is not None:
            # the region scores have no window mask and no sink logit: they would be dropped
            raise UserError("region methods take attention without a window or sinks; a layer "
                             f"has window={layer.window}, sinks={layer.sinks is not None}")
    for layer in layers:
        layer._region_method = method
        layer._region_tables = {}
        layer.forward = types.MethodType(_region_forward, layer)
    return layers


def remove_region_method(model: nn.Module) -> None:
    """Undo :func:`apply_region_method` (layers not patched are left alone)."""
    for m in model.modules():
        if isinstance(m, MultiHeadAttention) and hasattr(m, "_region_method"):
            del m.forward, m._region_method, m._region_tables


def region_ready(encoding: PositionalEncoding | type[PositionalEncoding]) -> str | None:
    """Why region methods refuse ``encoding``, or None when they take it: a class answers
    for its kind, an instance for its options too.

    The patched attention scores each pair from q and k rotated at the method's positions by
    the encoding's frequencies and nothing else, so it takes RoPE itself (a variant adds terms
    of its own), with frequencies fixed whatever the length (its tables are built once) and
    no factor on the logits: neither YaRN's attention factor nor one read from the query's
    position (log-n, temperature tuning), which the region scores would silently drop.
    p-RoPE passes: its dropped frequencies are zeros, which rotate nothing.
    """
    kind = encoding if isinstance(encoding, type) else type(encoding)
    if kind is not RotaryEncoding:
        return (f"region methods need a rope encoding (RoPE itself), got "
                f"{getattr(kind, 'name', '') or kind.__name__}")
    if isinstance(encoding, type):
        return None
    if encoding.length_dependent:
        return (f"region methods need a rope encoding whose frequencies do not depend on the "
                f"length, got scaling {encoding.scaling['rope_type']!r}")
    if encoding.attention_factor != 1.0:
        return (f"region methods need a rope encoding without an attention factor, got "
                f"{encoding.attention_factor} from scaling {encoding.scaling['rope_type']!r}")
    if encoding.logn_base_len is not None or encoding.temperature_floor is not None:
        return ("region methods need a rope encoding whose logits factor does not read the "
                "query's position (no log-n scaling or temperature tuning): got "
                f"logn_base_len={encoding.logn_base_len}, "
                f"temperature_floor={encoding.temperature_floor}")
    return None


def _table(layer: MultiHeadAttention, pe: nn.Module) -> RotaryTable:
    reason = region_ready(pe)
    if reason is not None:
        raise UserError(reason)
    inv_freq = pe.frequencies(0)[0]
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
