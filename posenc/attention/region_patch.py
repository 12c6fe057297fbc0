"""Region methods (:mod:`posenc.methods.regions`) on posenc's own RoPE models: every
self-attention layer of a module tree (a ``TransformerLM``, a block, ...) is given the method
through its declared ``method`` slot (:class:`~.attention.MultiHeadAttention`).

``apply_region_method(model, SelfExtend(64, 4))`` sets the method of every self-attention layer
of ``model``: the layer then keeps raw keys in its KV cache and scores each (query, key) pair
under the method's position map, with the layer encoding's RoPE frequencies
(:func:`~.region_forward.region_self_attention`); ``remove_region_method`` undoes it. The
encoding must be a ``rope`` (any layout, rotary dimension or p-RoPE fraction) whose
frequencies do not depend on the length, with no attention factor and no logits factor
of the query's position (:func:`region_ready`); the layers have no window and no attention
sinks. Rows must be unpadded with shared positions (no key padding, no packed documents).
StreamingLLM's outputs are exact here but posenc's KV cache keeps every key (the Hugging Face
patch evicts, see ``posenc.hf.extend``).
"""

from __future__ import annotations

from torch import nn

from ..errors import UserError
from ..methods.regions import RegionMethod
from .attention import MultiHeadAttention
from .region_forward import region_ready  # noqa: F401  (re-exported)


def apply_region_method(model: nn.Module, method: RegionMethod) -> list[MultiHeadAttention]:
    """Set ``method`` on every self-attention layer under ``model``; returns the layers."""
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention) and not m.cross]
    if not layers:
        raise UserError(f"{type(model).__name__} has no self-attention layer to patch")
    for layer in layers:                      # every layer is checked before any is patched
        if layer.method is not None:
            raise UserError("a region method is already applied; call remove_region_method "
                            "first")
        if layer.window is not None or layer.sinks is not None:
            # the region scores have no window mask and no sink logit: they would be dropped
            raise UserError("region methods take attention without a window or sinks; a layer "
                             f"has window={layer.window}, sinks={layer.sinks is not None}")
    for layer in layers:
        layer.method = method
    return layers


def remove_region_method(model: nn.Module) -> None:
    """Undo :func:`apply_region_method` (layers without a method are left alone)."""
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            m.method = None
