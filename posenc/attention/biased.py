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

with rowsum(P * dO V^T) = rowsum(dO * O). The eager backend uses it for value-term encodings
(Shaw) when it trains in fp32 without dropout.

Masked pairs have P = 0, so their dS (the bias gradient) is exactly 0: entries of the bias at
masked pairs are never read for the result and get no gradient. fp32 only, no dropout (the
attention backends use their plain paths otherwise).
"""

from __future__ import annotations

import torch
from torch import Tensor


class _BiasedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, hidden: Tensor | None,
                scale: float) -> Tensor:
        b, h, lq, d = q.shape
        lk = k.shape[2]
        q3 = q.reshape(b * h, lq, d)
        k3 = k.reshape(b * h, lk, d)
        v3 = v.reshape(b * h, lk, v.shape[-1])
        logits = torch.empty(b, h, lq, lk, dtype=q.dtype, device=q.device)
        if hidden is None:
            logits.copy_(bias.expand(b, h, lq, lk))
        else:                              # bias + (0 or -inf): one pass, no masked_fill
            mask = torch.zeros(lq, lk, dtype=q.dtype, device=q.device)
            torch.add(bias.expand(b, h, lq, lk), mask.masked_fill_(hidden, float("-inf")),
                      out=logits)
        logits = logits.view(b * h, lq, lk).baddbmm_(q3, k3.transpose(1, 2), alpha=scale)
        weights = torch.softmax(logits, dim=-1, out=logits)           # (B * H, Lq, Lk)
        out = torch.bmm(weights, v3)                                  # (B * H, Lq, Dv)
        ctx.save_for_backward(q3, k3, v3, weights, out)
        ctx.set_materialize_grads(False)   # an unused output's gradient stays None, not zeros
        ctx.scale = scale
        ctx.shapes = (q.shape, k.shape, v.shape, bias.shape)
        return out.view(b, h, lq, -1), weights.view(b, h, lq, lk)

    @staticmethod
    def backward(ctx, grad_out: Tensor, grad_weights: Tensor | None):
        q3, k3, v3, weights, out = ctx.saved_tensors
        q_shape, k_shape, v_shape, bias_shape = ctx.shapes
        if grad_out is None:                                          # only weights used
            grad_out = torch.zeros_like(out)
        go = grad_out.reshape(out.shape)                              # (B * H, Lq, Dv)
        grad_q = grad_k = grad_v = grad_bias = None
        if ctx.needs_input_grad[2]:
            grad_v = torch.bmm(weights.transpose(1, 2), go).view(v_shape)
        grad_s = torch.bmm(go, v3.transpose(1, 2))                    # dP (B * H, Lq, Lk)
        row = (go * out).sum(dim=-1, keepdim=True)                    # sum_j P dP, from dO
        if grad_weights is not None:                                  # weights used outside
            grad_w = grad_weights.reshape(weights.shape)
            grad_s.add_(grad_w)
            row = row + (grad_w * weights).sum(dim=-1, keepdim=True)
        grad_s.sub_(row).mul_(weights)                                # dS
        if ctx.needs_input_grad[0]:
            grad_q = torch.bmm(grad_s, k3).mul_(ctx.scale).view(q_shape)
        if ctx.needs_input_grad[1]:
            grad_k = torch.bmm(grad_s.transpose(1, 2), q3).mul_(ctx.scale).view(k_shape)
        if ctx.needs_input_grad[3]:
            grad_bias = grad_s.view(*q_shape[:3], k_shape[2]).sum_to_size(bias_shape)
        return grad_q, grad_k, grad_v, grad_bias, None, None


def biased_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, *,
                     hidden: Tensor | None = None, scale: float,
                     with_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(scale * q k^T + bias, with ``hidden`` pairs masked) v.

    q (B, H, Lq, D), k (B, H, Lk, D), v (B, H, Lk, Dv), bias broadcastable to
    (B, H, Lq, Lk), hidden (Lq, Lk) bool (True: the key is not visible) or None.
    Returns (B, H, Lq, Dv), and with ``with_weights`` also the weights (B, H, Lq, Lk), for a
    value term computed from them; differentiable in q, k, v and bias, through both outputs.
    The weights are the buffer the backward keeps: read them, never modify them in place.
    """
    out, weights = _BiasedAttention.apply(q, k, v, bias, hidden, scale)
    return (out, weights) if with_weights else out


def fits_biased_attention(q: Tensor, k: Tensor, v: Tensor, dropout: float) -> bool:
    """Whether :func:`biased_attention` serves these inputs (fp32, no dropout)."""
    return dropout == 0.0 and q.dtype == k.dtype == v.dtype == torch.float32
