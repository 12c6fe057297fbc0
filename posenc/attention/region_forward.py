"""The self-attention of a posenc layer whose ``method`` slot holds a region method
(:mod:`posenc.methods.regions`), and which encodings such a method takes.

The layer (:class:`~.attention.MultiHeadAttention`) calls :func:`region_self_attention` in
place of its usual path when its method is set; the encoding must be RoPE itself
(:func:`region_ready`).
"""

from __future__ import annotations

from torch import Tensor, nn

from ..encodings.base import PositionalEncoding
from ..encodings.rope import RotaryEncoding
from ..errors import UserError
from .cache import KVCache
from .context import AttentionContext
from .extension_methods import RotaryTable, blockwise_region_attention


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


def _table(layer: nn.Module, pe: nn.Module) -> RotaryTable:
    reason = region_ready(pe)
    if reason is not None:
        raise UserError(reason)
    inv_freq = pe.frequencies(0)[0]
    key = (id(pe), inv_freq.device)
    if key not in layer.rotary_tables:
        layer.rotary_tables[key] = RotaryTable(inv_freq, pe.layout)
    return layer.rotary_tables[key]


def region_self_attention(layer: nn.Module, x: Tensor, ctx: AttentionContext,
                          pe: nn.Module, cache: KVCache | None = None) -> Tensor:
    """Self-attention of ``layer`` under its ``method``: x (B, T, C) at ``ctx.pos`` (T,) ->
    (B, T, C); raw keys join the cache."""
    b, t, c = x.shape
    if ctx.pos.dim() != 1 or ctx.key_valid is not None or ctx.documents is not None \
            or (cache is not None and (cache.padded or cache.per_sample)):
        raise UserError("region methods need unpadded rows sharing positions (no "
                        "attention_mask, per-row positions or packed documents)")
    rotate = _table(layer, pe)
    q, k, v = (layer.heads(z) for z in layer.qkv_proj(x).chunk(3, dim=-1))
    k_pos = ctx.pos
    if cache is not None:
        k, v, k_pos = cache.append(k, v, ctx.pos)
    out = blockwise_region_attention(q, k, v, ctx.pos, k_pos, layer.method.regions, rotate,
                                     layer.head_dim ** -0.5,
                                     rising_runs=layer.method.rising_runs)
    return layer.out_proj(out.transpose(1, 2).reshape(b, t, c))
