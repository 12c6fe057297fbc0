"""Attention with an additive logits term (a positional bias) and its exact backward.

``scaled_dot_product_attention`` takes a float mask, but on CPU it runs its unfused "math"
kernel as soon as the mask needs a gradient (a learned bias: T5, KERPLE, FIRE, DeBERTa,
Transformer-XL...), and that kernel keeps several (B, H, Lq, Lk) intermediates and makes
extra passes over them (mask checks, a "safe" softmax). :func:`biased_attention` is the same
computation with the fewest passes: the bias plus the causal mask (0 or -inf) is written into
the logits buffer, one ``baddbmm`` adds the scaled q.k, the softmax runs in place, and
only the weights are kept for the backward (they can be returned for a value term; their
gradient G then joins dP):

    dV = P^T dO,  dP = dO V^T + G,  dS = P * (dP - rowsum(P * dP)),  dBias = dS (summed
    over broadcast dims),  dQ = scale dS K,  dK = scale dS^T Q,

with rowsum(P * dO V^T) = rowsum(dO * O) without G (with G, the rowsum of P * dP is taken
from the dS buffer itself, in place). The eager backend uses it for value-term encodings
(Shaw) when it trains in fp32 without dropout.

Masked pairs have P = 0, so their dS (the bias gradient) is exactly 0: entries of the bias at
masked pairs are never read for the result and get no gradient. fp32 on the CPU, no dropout
(posenc.attention.routing sends every other call to SDPA or FlexAttention).

Causal masks hide whole blocks: the queries run in up to four row blocks, each attending
over the keys its rows see only (a causal square block: 1/4, 2/4, 3/4 and all of them), as
separate products, softmaxes and backward passes. That skips 3/8 of the logits and of every
(B, H, Lq, Lk) product, as a causal flash kernel skips its masked tiles (not when the
weights are handed out). The blocks follow from the two lengths alone (queries are the last
Lq keys), so nothing is read back from a tensor.

The bias may also be a :class:`~posenc.encodings.base.FusedBias`, which writes itself (with
-inf at the pairs it hides) into each block of logits and turns the blocks' logit gradients
into the gradients of its own inputs: no (B, H, Lq, Lk) bias tensor, mask pass or bias
gradient tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..encodings.base import FusedBias
from ..errors import UserError
from .masks import causal_additive

#: fewest query rows for which hidden blocks are skipped; most row blocks, fewest rows in one
SPLIT_MIN_ROWS, MAX_BLOCKS, MIN_BLOCK_ROWS = 64, 4, 32


def _row_blocks(causal: bool, lq: int, lk: int, whole: bool) -> list[tuple[int, int, int]]:
    """[(first row, end row, keys)]: the rows of each block attend over the first ``keys``
    keys only (under a causal mask row i sees i + Lk - Lq + 1 keys). Up to ``MAX_BLOCKS``
    blocks of a multiple of 8 rows, where they skip at least 1/8 of the (Lq, Lk) pairs;
    else one block."""
    full = [(0, lq, lk)]
    if whole or not causal or lq < SPLIT_MIN_ROWS:
        return full
    size = max(MIN_BLOCK_ROWS, -(-lq // (8 * MAX_BLOCKS)) * 8)
    blocks: list[tuple[int, int, int]] = []
    for a in range(0, lq, size):
        b = min(a + size, lq)
        need = min(lk, b + lk - lq)                  # the keys of the block's last row
        if blocks and blocks[-1][2] == need:
            blocks[-1] = (blocks[-1][0], b, need)
        else:
            blocks.append((a, b, need))
    work = sum((b - a) * need for a, b, need in blocks)
    return blocks if 8 * work <= 7 * lq * lk else full


def _add_key_rows(total: Tensor | None, part: Tensor, lk: int) -> Tensor:
    """Key-side gradient: ``part`` (B * H, keys, D) from a block over the first keys, added
    into ``total`` (B * H, Lk, D) (allocated by the first block)."""
    keys = part.shape[1]
    if total is None:
        if keys == lk:
            return part
        total = part.new_zeros(part.shape[0], lk, part.shape[2])
    total[:, :keys] += part
    return total


@dataclass(frozen=True)
class BiasedSpec:
    """How :func:`biased_attention` treats one call besides q, k, v and the bias.

    Attributes:
        scale: multiplies q.k.
        causal: the queries are the last Lq keys and see the keys up to themselves.
        with_weights: also return the weights (B, H, Lq, Lk).
        hidden: (B or 1, 1, Lq, Lk) bool, more pairs to hide (padding, other documents).
        fused: set by :func:`biased_attention` for a :class:`FusedBias`.
    """

    scale: float
    causal: bool = False
    with_weights: bool = False
    hidden: Tensor | None = None
    fused: FusedBias | None = None


#: where a fused bias's inputs start among _BiasedAttention's arguments
_FUSED_INPUTS = 5


class _BiasedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, spec: BiasedSpec,
                *fused_inputs: Tensor):
        fused, causal, hidden, scale, with_weights = (spec.fused, spec.causal, spec.hidden,
                                                      spec.scale, spec.with_weights)
        b, h, lq, d = q.shape
        lk = k.shape[2]
        q3 = q.reshape(b * h, lq, d)
        k3 = k.reshape(b * h, lk, d)
        v3 = v.reshape(b * h, lk, v.shape[-1])
        full_bias = bias.expand(b, h, lq, lk) if fused is None else None
        mask = None
        if causal and fused is None:               # bias + (0 or -inf): one pass
            mask = causal_additive(lq, lk, q.device, q.dtype)
        if hidden is not None:                     # padding, documents: (B|1, 1, Lq, Lk)
            extra = torch.zeros(hidden.shape, dtype=q.dtype, device=q.device)
            extra.masked_fill_(hidden, float("-inf"))
            mask = extra if mask is None else extra + mask
        blocks = _row_blocks(causal, lq, lk, whole=with_weights)
        out = q3.new_empty(b * h, lq, v.shape[-1]) if len(blocks) > 1 else None
        weights = []
        for r0, r1, keys in blocks:
            logits = q.new_empty(b, h, r1 - r0, keys)
            if fused is not None:                                     # it masks hidden pairs
                fused.write(logits, r0)
            elif mask is None:
                logits.copy_(full_bias[:, :, r0:r1, :keys])
            else:
                torch.add(full_bias[:, :, r0:r1, :keys], mask[..., r0:r1, :keys], out=logits)
            logits = logits.view(b * h, r1 - r0, keys).baddbmm_(
                q3[:, r0:r1], k3[:, :keys].transpose(1, 2), alpha=scale)
            w = torch.softmax(logits, dim=-1, out=logits)             # (B * H, rows, keys)
            if len(blocks) == 1:
                out = torch.bmm(w, v3)
            else:
                out[:, r0:r1] = torch.bmm(w, v3[:, :keys])
            weights.append(w)
        ctx.save_for_backward(q3, k3, v3, out, *weights)
        ctx.set_materialize_grads(False)   # an unused output's gradient stays None, not zeros
        ctx.scale, ctx.blocks, ctx.fused = scale, blocks, fused
        ctx.shapes = (q.shape, k.shape, v.shape, None if bias is None else bias.shape)
        out = out.view(b, h, lq, -1)
        return (out, weights[0].view(b, h, lq, lk)) if with_weights else out

    @staticmethod
    def backward(ctx, grad_out: Tensor | None, grad_weights: Tensor | None = None):
        q3, k3, v3, out, *weights = ctx.saved_tensors
        q_shape, k_shape, v_shape, bias_shape = ctx.shapes
        blocks = ctx.blocks
        if grad_out is None:                                          # only weights used
            grad_out = torch.zeros_like(out)
        go = grad_out.reshape(out.shape)                              # (B * H, Lq, Dv)
        row = (go * out).sum(dim=-1, keepdim=True)                    # sum_j P dP, from dO
        lq, lk = q_shape[2], k_shape[2]
        need_q, need_k, need_v, need_bias = ctx.needs_input_grad[:4]
        fused = ctx.fused if any(ctx.needs_input_grad[_FUSED_INPUTS:]) else None
        split = len(blocks) > 1
        grad_s = q3.new_empty(q3.shape[0], lq, lk) if split and need_bias else None
        fused_blocks = []
        grad_q = torch.empty_like(q3) if split and need_q else None
        grad_k = grad_v = None
        # the last block usually sees every key: its products become the key-side gradients,
        # and the other blocks' (over fewer keys) are added to their first rows
        for (r0, r1, keys), w in reversed(list(zip(blocks, weights))):
            g = go[:, r0:r1]
            ds = torch.bmm(g, v3[:, :keys].transpose(1, 2))           # dP (B * H, rows, keys)
            r = row[:, r0:r1]
            if grad_weights is not None:                              # weights used outside
                ds.add_(grad_weights.reshape(w.shape)).mul_(w)            # P * dP
                ds.addcmul_(w, ds.sum(dim=-1, keepdim=True), value=-1)    # dS, no temporary
            else:
                ds.sub_(r).mul_(w)                                    # dS
            if need_v:
                grad_v = _add_key_rows(grad_v, torch.bmm(w.transpose(1, 2), g), lk)
            if need_k:
                grad_k = _add_key_rows(grad_k, torch.bmm(ds.transpose(1, 2), q3[:, r0:r1]), lk)
            if need_q:
                part = torch.bmm(ds, k3[:, :keys])                    # (B * H, rows, D)
                if split:
                    grad_q[:, r0:r1] = part
                else:
                    grad_q = part
            if fused is not None:
                fused_blocks.insert(0, (r0, ds.view(*q_shape[:2], r1 - r0, keys)))
            if not split:
                grad_s = ds
            elif grad_s is not None:
                grad_s[:, r0:r1, :keys] = ds
                grad_s[:, r0:r1, keys:] = 0
        grad_q = grad_q.mul_(ctx.scale).view(q_shape) if need_q else None
        grad_k = grad_k.mul_(ctx.scale).view(k_shape) if need_k else None
        grad_v = grad_v.view(v_shape) if need_v else None
        grad_bias = grad_s.view(*q_shape[:3], lk).sum_to_size(bias_shape) if need_bias \
            else None
        fused_grads = fused.grads(fused_blocks) if fused is not None else \
            (None,) * (len(ctx.needs_input_grad) - _FUSED_INPUTS)
        return (grad_q, grad_k, grad_v, grad_bias) + (None,) * (_FUSED_INPUTS - 4) + \
            tuple(fused_grads)


def biased_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | FusedBias,
                     spec: BiasedSpec) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(spec.scale * q k^T + bias, causally masked if ``spec.causal``) v.

    q (B, H, Lq, D), k (B, H, Lk, D), v (B, H, Lk, Dv), bias broadcastable to
    (B, H, Lq, Lk) or a :class:`~posenc.encodings.base.FusedBias` of a causal square block
    (B, H, L, L), which masks its own hidden pairs (``spec.causal`` must be True). Under
    ``causal`` the queries are the last Lq of the keys. ``spec.hidden`` (B or 1, 1, Lq, Lk)
    bool hides more pairs (padding, other documents; not with a fused bias); every query must
    still see a key. Returns (B, H, Lq, Dv), and with ``spec.with_weights`` also the weights
    (B, H, Lq, Lk), for a value term computed from them; differentiable in q, k, v and bias
    (a fused bias: its ``inputs``), through both outputs. The weights are the buffer the
    backward keeps: read them, never modify them in place.
    """
    if isinstance(bias, Tensor):
        return _BiasedAttention.apply(q, k, v, bias, replace(spec, fused=None))
    if spec.hidden is not None:
        raise UserError("a fused bias covers a causal block without padding or documents")
    if tuple(bias.shape) != (*q.shape[:3], k.shape[2]) or q.shape[2] != k.shape[2]:
        raise UserError(f"fused bias of shape {tuple(bias.shape)} for attention logits "
                         f"{(*q.shape[:3], k.shape[2])}: it covers a causal square block")
    if not spec.causal:
        raise UserError("a fused bias masks the hidden pairs of a causal block: pass "
                         "causal=True")
    return _BiasedAttention.apply(q, k, v, None, replace(spec, fused=bias), *bias.inputs)
