"""The attention implementations; all give the same numbers (routing: routing.py).

- ``sdpa``: ``scaled_dot_product_attention``; an encoding's bias is materialized as a float
  mask (B|1, H, Lq, Lk). Fastest without a bias; trains everywhere.
- ``fused``: the same attention through ``biased.py`` on the CPU, which makes fewer passes over
  the (B, H, Lq, Lk) logits than the kernel SDPA falls back to for a trainable mask; with a
  value term it also hands out the weights.
- ``flex``: FlexAttention with the encoding's ``score_mod``; never builds the (H, n, n) bias.
- ``eager``: explicit softmax; supports every hook (value terms) and returns the weights.

Masks come from the two lengths (causal: queries are the last Lq keys) and from the padding
and document masks a caller gives (masks.py), never from positions (an attention window
alone counts positions, see masks.py), so caches, offsets, padded and packed rows need no
special cases and nothing is read back from a tensor.

Learned sink logits (``call.sinks``, one per head: gpt-oss; x-transformers' head-learned
sink) join each query's softmax denominator as a virtual key with a zero value: sdpa and flex
append a zero key and value whose logit is the sink (a bias column; a score_mod), eager
appends a logits column.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from ..encodings.base import PositionalEncoding
from ..errors import UserError
from .biased import BiasedSpec, biased_attention
from .context import AttentionCall
from .masks import Masks, Window, additive, causal_additive, causal_visible
from .routing import BACKENDS, FLEX_MIN_LEN, RoutingFacts, choose_backend

__all__ = ["BACKENDS", "FLEX_MIN_LEN", "attend", "route"]


def route(pe: PositionalEncoding, q: Tensor, k: Tensor, v: Tensor,
          call: AttentionCall | None = None, k_len: int | None = None) -> str:
    """:func:`~posenc.attention.routing.choose_backend` for these tensors (their device type,
    dtype, lengths and whether gradients flow: metadata only) and ``call``'s requested
    backend, need_weights and dropout (None: "auto", no weights, no dropout). ``k_len``: the
    keys attention will see, if more than ``k`` holds (a KV cache)."""
    grad = torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad
        or any(p.requires_grad for p in pe.parameters()))
    requested, need_weights, dropout = ("auto", False, 0.0) if call is None else \
        (call.backend, call.need_weights, call.dropout)
    facts = RoutingFacts(requested=requested, device_type=q.device.type, dtype=q.dtype,
                         grad=grad, q_len=q.shape[2], k_len=k.shape[2] if k_len is None else k_len,
                         need_weights=need_weights, dropout=dropout,
                         compiling=torch.compiler.is_compiling(),
                         sinks=call is not None and call.sinks is not None)
    try:
        return choose_backend(pe.backends(), pe.has_bias, facts)
    except ValueError as err:
        raise UserError(f"encoding {pe.name!r}: {err}") from None


def attend(q: Tensor, k: Tensor, v: Tensor, pe: PositionalEncoding, call: AttentionCall
           ) -> tuple[Tensor, Tensor | None]:
    """Attention over already transformed q (B, H, Lq, D), k, v (B, H, Lk, D).

    Applies the encoding's temperature, bias/score_mod and value term. ``call.at``: the
    positions and host facts the hooks read (``causal``: the queries are the last Lq keys
    and see the keys up to themselves; ``at.backend``: the implementation :func:`route`
    already chose, else ``call.backend`` is routed here); ``call.masks``: padding and
    document masks. Returns the output (B, H, Lq, D) and, for eager with
    ``call.need_weights``, the weights (B, H, Lq, Lk).
    """
    if call.at.backend is None:
        call = call.routed(route(pe, q, k, v, call))
    name, at = call.at.backend, call.at
    q_scale = pe.attn_scale(at)
    if q_scale is not None:
        q = q * q_scale.to(q.dtype)[..., None, :, None]           # (B, H, Lq, D)
    if name == "sdpa":
        bias = pe.score_bias(q, k, at)
        if call.sinks is not None:
            return _sdpa_sinks(q, k, v, bias, pe.sm_scale(), call), None
        return _sdpa(q, k, v, bias, pe.sm_scale(), call), None
    if name == "fused":
        return _fused(q, k, v, pe, call), None
    if name == "flex":
        return _flex(q, k, v, pe, call), None
    return _eager(q, k, v, pe, call)


def _sdpa(q, k, v, bias, scale, call):
    """SDPA with an optional additive bias; the causal mask as ``is_causal`` for a square
    block, none for a single query (the last key: it sees them all), a mask otherwise."""
    lq, lk = q.shape[2], k.shape[2]
    causal, masks, dropout = call.causal, call.active_masks(), call.dropout
    masked = causal and lq > 1
    if masks is not None:                       # padding or documents: one boolean mask
        visible = masks.visibility(lq, lk, q.device, causal)
        if bias is not None:
            visible = bias.to(q.dtype).masked_fill(~visible, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=dropout,
                                              scale=scale)
    if bias is None:
        # branches, not boolean expressions: traced lengths then give plain bools
        if not masked:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scale)
        if lq == lk:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True,
                                                  scale=scale)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_visible(lq, lk, q.device),
                                              dropout_p=dropout, scale=scale)
    bias = bias.to(q.dtype)
    if masked:
        bias = bias.masked_fill(~causal_visible(lq, lk, q.device), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout,
                                          scale=scale)


def _sdpa_sinks(q, k, v, bias, scale, call):
    """SDPA with sink logits: a zero key and value appended to k, v (B, H, Lk, D), whose
    logit is the bias column sinks (H,) (q.0 = 0), so each row's denominator gains
    exp(sink) and its output nothing."""
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    masks = call.active_masks()
    if masks is not None:
        visible = masks.visibility(lq, lk, q.device, call.causal)       # (B|1, 1, Lq, Lk)
    elif call.causal and lq > 1:
        visible = causal_visible(lq, lk, q.device)[None, None]
    else:
        visible = None
    mask = q.new_zeros(1, 1, lq, lk) if bias is None else bias.to(q.dtype)
    if visible is not None:
        mask = torch.where(visible, mask, float("-inf"))
    rows = mask.shape[0]
    sink = call.sinks.to(q.dtype).view(1, h, 1, 1).expand(rows, h, lq, 1)
    mask = torch.cat([mask.expand(rows, h, lq, lk), sink], dim=-1)     # (B|1, H, Lq, Lk + 1)
    k = torch.cat([k, k.new_zeros(b, h, 1, k.shape[-1])], dim=2)
    v = torch.cat([v, v.new_zeros(b, h, 1, v.shape[-1])], dim=2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=call.dropout,
                                          scale=scale)


def _fused(q, k, v, pe, call):
    at, masks = call.at, call.active_masks()
    value_term = pe.backends() == ("eager",)          # this instance adds a value term
    bias = pe.fused_bias(q, k, at) if masks is None else None
    if bias is None:
        bias = pe.score_bias(q, k, at)
    if bias is None and not value_term:                # e.g. xl in its rotary form
        no_dropout = AttentionCall(at, call.backend, call.need_weights, 0.0, call.masks)
        return _sdpa(q, k, v, None, pe.sm_scale(), no_dropout)
    if bias is None:
        bias = q.new_zeros(())
    hidden = None if masks is None else ~masks.visibility(q.shape[2], k.shape[2], q.device,
                                                          causal=False)
    spec = BiasedSpec(scale=pe.sm_scale(), causal=at.causal, with_weights=value_term,
                      hidden=hidden)
    if not value_term:
        return biased_attention(q, k, v, bias, spec)
    out, weights = biased_attention(q, k, v, bias, spec)
    extra = pe.value_term(weights, at)
    return out if extra is None else out + extra


#: compiled flex kernels kept per process (one per shape and score_mod); past torch's
#: default of 8, dynamo would silently fall back to the unfused kernel that builds (H, n, n)
FLEX_RECOMPILE_LIMIT = 64


@functools.cache
def _compiled_flex():
    import torch._dynamo.config as dynamo_config
    from torch.nn.attention.flex_attention import flex_attention
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, FLEX_RECOMPILE_LIMIT)
    return torch.compile(flex_attention, dynamic=False)


#: FlexAttention's default sparse block size
_FLEX_BLOCK = 128


def _block_extent(n: int, n_blocks: int, device) -> tuple[Tensor, Tensor, Tensor]:
    """Per block of ``_FLEX_BLOCK`` indices 0..n-1: first and last index, and whether the
    block is complete."""
    first = torch.arange(n_blocks, device=device) * _FLEX_BLOCK
    last = (first + _FLEX_BLOCK - 1).clamp(max=n - 1)
    return first, last, first + _FLEX_BLOCK <= n


def _ordered(blocks: Tensor) -> tuple[Tensor, Tensor]:
    """(nq, nk) bool -> per query block: how many kv blocks, and their indices first."""
    dense = blocks.to(torch.int32)
    count = dense.sum(dim=-1, dtype=torch.int32)
    order = torch.argsort(dense, dim=-1, descending=True, stable=True).to(torch.int32)
    return count[None, None].contiguous(), order[None, None].contiguous()   # (1, 1, nq[, nk])


def _block_mask(lq: int, lk: int, device, causal: bool, mask_mod, partial_only: bool,
                allowed: Tensor | None = None):
    """A BlockMask from block index ranges, without the (Lq, Lk) mask ``create_block_mask``
    would evaluate. Causal (query i sees keys up to i + Lk - Lq): a block is skipped where no
    key is visible, full where every key is (mask_mod skipped), partial otherwise; with
    ``partial_only`` (padding, documents or a window hide more) no block is full. ``allowed``
    (nq, nk) bool: blocks that may hold a visible pair (a window's), the others skipped."""
    from torch.nn.attention.flex_attention import BlockMask
    offset = lk - lq
    n_q, n_k = -(-lq // _FLEX_BLOCK), -(-lk // _FLEX_BLOCK)
    q_lo, q_hi, q_complete = _block_extent(lq, n_q, device)
    k_lo, k_hi, k_complete = _block_extent(lk, n_k, device)
    if causal:
        some = k_lo[None, :] <= q_hi[:, None] + offset                    # (nq, nk)
        every = (k_hi[None, :] <= q_lo[:, None] + offset) & q_complete[:, None] & \
            k_complete[None, :]
    else:
        some = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
        every = q_complete[:, None] & k_complete[None, :]
    if partial_only:
        every = torch.zeros_like(every)
    if allowed is not None:
        some = some & allowed
    partial_count, partial_index = _ordered(some & ~every)
    full_count, full_index = _ordered(every)
    return BlockMask.from_kv_blocks(partial_count, partial_index, full_count, full_index,
                                    BLOCK_SIZE=_FLEX_BLOCK, mask_mod=mask_mod,
                                    seq_lengths=(lq, lk))


def _causal_block_mask(lq: int, lk: int, device):
    """The causal BlockMask: query i sees keys up to i + Lk - Lq."""
    offset = lk - lq

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return _block_mask(lq, lk, device, True, causal, partial_only=False)


def _masked_block_mask(lq: int, lk: int, device, causal: bool, masks: Masks):
    """The BlockMask of :meth:`Masks.visibility` (padding, documents, causal or not), with
    the per-sequence masks read inside the mask_mod."""
    offset = lk - lq
    key_valid, documents, own = masks.key_valid, masks.documents, masks.self_attention
    window, q_pos, k_pos = masks.window, masks.q_pos, masks.k_pos

    def visible(b, h, q_idx, kv_idx):
        ok = kv_idx <= q_idx + offset if causal else kv_idx >= 0
        if window is not None:
            qp = q_pos[b, q_idx] if q_pos.dim() == 2 else q_pos[q_idx]
            kp = k_pos[b, kv_idx] if k_pos.dim() == 2 else k_pos[kv_idx]
            ok = ok & window.pair_visible(qp, kp)
        if key_valid is not None:
            keep = key_valid[b, kv_idx]
            if own:                      # a padding query sees its own key only
                keep = (keep & key_valid[b, q_idx + offset]) | (kv_idx == q_idx + offset)
            ok = ok & keep
        if documents is not None:
            ok = ok & (documents[b, q_idx + offset] == documents[b, kv_idx])
        return ok

    allowed = None if window is None else _window_blocks(window, q_pos, k_pos, device)
    return _block_mask(lq, lk, device, causal, visible, partial_only=True, allowed=allowed)


def _position_blocks(pos: Tensor) -> tuple[Tensor, Tensor]:
    """Positions (L,) -> the smallest and largest of each block of ``_FLEX_BLOCK``."""
    n = pos.shape[0]
    n_blocks = -(-n // _FLEX_BLOCK)
    padded = torch.cat([pos, pos[-1:].expand(n_blocks * _FLEX_BLOCK - n)])
    blocks = padded.view(n_blocks, _FLEX_BLOCK)
    return blocks.amin(dim=1), blocks.amax(dim=1)


def _window_blocks(window: Window, q_pos: Tensor, k_pos: Tensor, device) -> Tensor | None:
    """(nq, nk) bool: the blocks where some pair may lie inside ``window``
    (:meth:`Window.may_see` of each block's smallest and largest position; positions shared
    by the batch, else None: no skipping)."""
    if q_pos.dim() != 1 or k_pos.dim() != 1:
        return None
    q_lo, q_hi = _position_blocks(q_pos.to(device))
    k_lo, k_hi = _position_blocks(k_pos.to(device))
    return window.may_see(q_lo, q_hi, k_lo, k_hi)


#: torch 2.13's CPU flex kernel returns wrong values (NaN, run-to-run differences) for head
#: dims of 16 and below; narrower heads are zero-padded to this width (exact: zeros add
#: nothing to q.k, and the padded value columns are dropped)
_FLEX_CPU_MIN_HEAD_DIM = 32


def _flex(q, k, v, pe, call):
    masks, causal = call.active_masks(), call.causal
    score_mod = pe.score_mod(q, k, call.at)
    lq, lk = q.shape[2], k.shape[2]
    if masks is not None:
        block_mask = _masked_block_mask(lq, lk, q.device, causal, masks)
    else:
        block_mask = _causal_block_mask(lq, lk, q.device) if causal else None
    if call.sinks is not None:
        k, v, score_mod, block_mask = _flex_sink_key(q, k, v, call.sinks, score_mod,
                                                     block_mask)
    d_v = v.shape[-1]
    if q.device.type == "cpu":
        q, k, v = (F.pad(t, (0, _FLEX_CPU_MIN_HEAD_DIM - t.shape[-1]))
                   if t.shape[-1] < _FLEX_CPU_MIN_HEAD_DIM else t for t in (q, k, v))
    out = _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask,
                           scale=pe.sm_scale())
    return out[..., :d_v]                                          # (B, H, Lq, Dv)


def _flex_sink_key(q, k, v, sinks, score_mod, block_mask):
    """k, v (B, H, Lk, D) with a zero key and value appended at index Lk, a score_mod whose
    logit there is sinks[h], and a BlockMask that shows it to every query (the others as
    before). The inner score_mod and mask_mod read key indices clamped to the real keys.
    (torch 2.13's CPU flex kernel returns no log-sum-exp to rescale by instead.)"""
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    k = torch.cat([k, k.new_zeros(b, h, 1, k.shape[-1])], dim=2)
    v = torch.cat([v, v.new_zeros(b, h, 1, v.shape[-1])], dim=2)
    inner_score = score_mod
    inner_mask = None if block_mask is None else block_mask.mask_mod

    def with_sink(score, b, h, q_idx, kv_idx):
        real = torch.clamp(kv_idx, max=lk - 1)
        inner = score if inner_score is None else inner_score(score, b, h, q_idx, real)
        return torch.where(kv_idx == lk, sinks[h].to(score.dtype), inner)

    def visible(b, h, q_idx, kv_idx):
        real = torch.clamp(kv_idx, max=lk - 1)
        seen = real >= 0 if inner_mask is None else inner_mask(b, h, q_idx, real)
        return seen | (kv_idx == lk)

    return k, v, with_sink, _block_mask(lq, lk + 1, q.device, False, visible,
                                        partial_only=True)


def _eager(q, k, v, pe, call):
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    at, masks, dropout = call.at, call.active_masks(), call.dropout
    addend = pe.score_bias(q, k, at)                               # (B|1, H, Lq, Lk) or None
    if addend is not None:
        addend = addend.float()
    # an additive -inf mask: no masked_fill forward, nothing backward
    if masks is not None:
        mask = additive(masks.visibility(lq, lk, q.device, at.causal))  # (B|1, 1, Lq, Lk)
        addend = mask if addend is None else addend + mask
    elif at.causal and lq > 1:
        mask = causal_additive(lq, lk, q.device)
        addend = mask if addend is None else addend + mask
    if addend is not None and addend.dim() > 2:
        addend = addend.expand(b, h, lq, lk).reshape(b * h, lq, lk)
    q3, k3t = q.reshape(b * h, lq, -1), k.reshape(b * h, lk, -1).transpose(1, 2)
    if addend is None:
        logits = torch.bmm(q3, k3t).float().mul_(pe.sm_scale())    # (B * H, Lq, Lk)
    elif q.dtype == torch.float32:                                 # addend + scale * q.k
        logits = torch.baddbmm(addend, q3, k3t, alpha=pe.sm_scale())
    else:
        logits = torch.bmm(q3, k3t).float().mul_(pe.sm_scale()).add_(addend)
    if call.sinks is None:
        weights = logits.softmax(dim=-1)
    else:                                   # the sink column joins the softmax, then goes
        sink = call.sinks.float().view(1, h, 1, 1).expand(b, h, lq, 1).reshape(b * h, lq, 1)
        weights = torch.cat([logits, sink], dim=-1).softmax(dim=-1)[..., :-1]
    weights = weights.to(q.dtype).view(b, h, lq, lk)               # (B, H, Lq, Lk)
    dropped = F.dropout(weights, dropout) if dropout > 0 else weights
    out = dropped @ v                                              # (B, H, Lq, D)
    extra = pe.value_term(dropped, at)
    if extra is not None:
        out = out + extra
    return out, (weights if call.need_weights else None)
