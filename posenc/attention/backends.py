"""Three ways to compute attention with an encoding's hooks; all give the same numbers.

- ``sdpa``: ``scaled_dot_product_attention``; an encoding's bias is materialized as a float
  mask (H, Lq, Lk). Fastest without a bias; trains everywhere. When a bias needs gradients
  (fp32, no dropout) the same attention runs through ``biased.py``, which makes fewer passes
  over the (B, H, Lq, Lk) logits than the kernel sdpa falls back to.
- ``flex``: FlexAttention with the encoding's ``score_mod``; never builds the (H, n, n) bias.
  On CPU (torch 2.13) it runs compiled and forward-only, so it serves evaluation at length.
- ``eager``: explicit softmax; supports every hook (value terms) and returns the weights.
  Value-term encodings that train (fp32, no dropout) run the same fused attention, which
  also hands out the weights.

Masks are built from positions (a key is visible if ``k_pos <= q_pos``), so caches and offsets
need no special cases.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from ..encodings.base import PositionalEncoding
from ..kernels.layouts.relative_shift import is_range
from .biased import biased_attention, fits_biased_attention

BACKENDS = ("auto", "sdpa", "flex", "eager")
#: "auto" picks flex for biased encodings from this key length on, when no gradient is needed
FLEX_MIN_LEN = 2048


def choose_backend(pe: PositionalEncoding, requested: str, *, k_len: int,
                   need_weights: bool = False) -> str:
    """The backend to run: ``requested`` if the encoding supports it, else ValueError."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown attention backend {requested!r}; valid: {', '.join(BACKENDS)}")
    allowed = pe.backends()
    if need_weights:
        return "eager"
    if requested != "auto":
        if requested not in allowed:
            raise ValueError(f"encoding {pe.name!r} cannot run on backend {requested!r}; "
                             f"it supports: {', '.join(allowed)}")
        if requested == "flex" and torch.is_grad_enabled() and not _flex_trains():
            raise ValueError("the flex backend is forward-only on this device; use it under "
                             "torch.no_grad() or pick sdpa/eager for training")
        return requested
    if allowed == ("eager",):
        return "eager"
    if pe.has_bias and "flex" in allowed and k_len >= FLEX_MIN_LEN and (
            not torch.is_grad_enabled() or _flex_trains()):
        return "flex"
    return "sdpa"


def _flex_trains() -> bool:
    return torch.cuda.is_available()


def visible(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Causal visibility from positions: (Lq, Lk) bool, True where k_pos <= q_pos."""
    return k_pos[None, :] <= q_pos[:, None]


def attend(q: Tensor, k: Tensor, v: Tensor, pe: PositionalEncoding, q_pos: Tensor,
           k_pos: Tensor, *, causal: bool, backend: str = "auto", dropout: float = 0.0,
           need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
    """Attention over already transformed q (B, H, Lq, D), k, v (B, H, Lk, D).

    Applies the encoding's temperature, bias/score_mod and value term.
    Returns the output (B, H, Lq, D) and, for eager with ``need_weights``, the weights
    (B, H, Lq, Lk).
    """
    name = choose_backend(pe, backend, k_len=k.shape[2], need_weights=need_weights)
    q_scale = pe.attn_scale(q_pos, k_pos, causal)
    if q_scale is not None:
        q = q * q_scale.to(q.dtype)[:, None]                      # (B, H, Lq, D)
    if name == "sdpa":
        return _sdpa(q, k, v, pe, q_pos, k_pos, causal, dropout), None
    if name == "flex":
        return _flex(q, k, v, pe, q_pos, k_pos, causal), None
    return _eager(q, k, v, pe, q_pos, k_pos, causal, dropout, need_weights)


def _needs_grad(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _sdpa(q, k, v, pe, q_pos, k_pos, causal, dropout):
    fused = pe.fused_bias(q, k, q_pos, k_pos, causal) if torch.is_grad_enabled() and \
        fits_biased_attention(q, k, v, dropout) else None
    if fused is not None and _needs_grad(q, k, v, *fused.inputs):
        hidden = ~visible(q_pos, k_pos) if causal else None
        return biased_attention(q, k, v, fused, hidden=hidden, scale=pe.sm_scale())
    bias = pe.score_bias(q, k, q_pos, k_pos, causal)
    if bias is None:
        aligned = causal and q.shape[2] == k.shape[2] and torch.equal(q_pos, k_pos)
        mask = visible(q_pos, k_pos) if causal and not aligned else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                              is_causal=aligned, scale=pe.sm_scale())
    bias = bias.to(q.dtype)
    if _needs_grad(q, k, v, bias) and fits_biased_attention(q, k, v, dropout):
        hidden = ~visible(q_pos, k_pos) if causal else None
        return biased_attention(q, k, v, bias, hidden=hidden, scale=pe.sm_scale())
    if causal:
        bias = bias.masked_fill(~visible(q_pos, k_pos), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout,
                                          scale=pe.sm_scale())


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


def _block_extent(pos: Tensor, n_blocks: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per block of ``_FLEX_BLOCK`` positions: min, max and whether the block is complete."""
    pad = n_blocks * _FLEX_BLOCK - pos.numel()
    padded = torch.cat((pos, pos[-1:].expand(pad))).view(n_blocks, _FLEX_BLOCK)
    lo, hi = padded.amin(dim=1), padded.amax(dim=1)
    complete = torch.arange(n_blocks, device=pos.device) < pos.numel() // _FLEX_BLOCK
    return lo, hi, complete


def _ordered(blocks: Tensor) -> tuple[Tensor, Tensor]:
    """(nq, nk) bool -> per query block: how many kv blocks, and their indices first."""
    dense = blocks.to(torch.int32)
    count = dense.sum(dim=-1, dtype=torch.int32)
    order = torch.argsort(dense, dim=-1, descending=True, stable=True).to(torch.int32)
    return count[None, None].contiguous(), order[None, None].contiguous()   # (1, 1, nq[, nk])


def _causal_block_mask(q_pos: Tensor, k_pos: Tensor, mask_mod):
    """The causal BlockMask from block-wise position ranges, without the (Lq, Lk) mask
    ``create_block_mask`` would evaluate. A block is skipped where no key is visible, full
    where every key is (mask_mod skipped), partial otherwise."""
    from torch.nn.attention.flex_attention import BlockMask
    n_q = -(-q_pos.numel() // _FLEX_BLOCK)
    n_k = -(-k_pos.numel() // _FLEX_BLOCK)
    q_lo, q_hi, q_complete = _block_extent(q_pos, n_q)
    k_lo, k_hi, k_complete = _block_extent(k_pos, n_k)
    some = k_lo[None, :] <= q_hi[:, None]                              # (nq, nk)
    every = (k_hi[None, :] <= q_lo[:, None]) & q_complete[:, None] & k_complete[None, :]
    partial_count, partial_index = _ordered(some & ~every)
    full_count, full_index = _ordered(every)
    return BlockMask.from_kv_blocks(partial_count, partial_index, full_count, full_index,
                                    BLOCK_SIZE=_FLEX_BLOCK, mask_mod=mask_mod,
                                    seq_lengths=(q_pos.numel(), k_pos.numel()))


def _causal_mask_mod(q_pos: Tensor, k_pos: Tensor):
    """mask_mod for k_pos <= q_pos. For position ranges (the usual case, with or without a
    cache offset) it compares indices against a 0-d offset tensor instead of gathering two
    positions per score, which is markedly cheaper inside the CPU kernel; the tensor (not a
    Python int) keeps one compiled kernel for every offset."""
    if is_range(q_pos) and is_range(k_pos):
        offset = q_pos[0] - k_pos[0]                                # 0-d tensor

        def range_mask(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx + offset
        return range_mask

    def gather_mask(b, h, q_idx, kv_idx):
        return k_pos[kv_idx] <= q_pos[q_idx]
    return gather_mask


#: torch 2.13's CPU flex kernel returns wrong values (NaN, run-to-run differences) for head
#: dims of 16 and below; narrower heads are zero-padded to this width (exact: zeros add
#: nothing to q.k, and the padded value columns are dropped)
_FLEX_CPU_MIN_HEAD_DIM = 32


def _flex(q, k, v, pe, q_pos, k_pos, causal):
    score_mod = pe.score_mod(q, k, q_pos, k_pos, causal)
    block_mask = None
    if causal:
        block_mask = _causal_block_mask(q_pos, k_pos, _causal_mask_mod(q_pos, k_pos))
    d_v = v.shape[-1]
    if q.device.type == "cpu":
        q, k, v = (F.pad(t, (0, _FLEX_CPU_MIN_HEAD_DIM - t.shape[-1]))
                   if t.shape[-1] < _FLEX_CPU_MIN_HEAD_DIM else t for t in (q, k, v))
    out = _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=block_mask,
                           scale=pe.sm_scale())
    return out[..., :d_v]                                          # (B, H, Lq, Dv)


def _eager(q, k, v, pe, q_pos, k_pos, causal, dropout, need_weights):
    b, h, lq, lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    if not need_weights and pe.overrides("value_term") and fits_biased_attention(
            q, k, v, dropout) and _needs_grad(q, k, v, *pe.parameters()):
        bias = pe.fused_bias(q, k, q_pos, k_pos, causal)
        if bias is None:
            bias = pe.score_bias(q, k, q_pos, k_pos, causal)
            bias = bias if bias is not None else q.new_zeros(())
        hidden = ~visible(q_pos, k_pos) if causal else None
        out, weights = biased_attention(q, k, v, bias, hidden=hidden, scale=pe.sm_scale(),
                                        with_weights=True)
        extra = pe.value_term(weights, q_pos, k_pos, causal)
        return (out if extra is None else out + extra), None
    addend = pe.score_bias(q, k, q_pos, k_pos, causal)            # (B|1, H, Lq, Lk) or None
    if addend is not None:
        addend = addend.float()
    if causal:           # an additive -inf mask: no masked_fill forward, nothing backward
        mask = torch.zeros(lq, lk, device=q.device).masked_fill_(~visible(q_pos, k_pos),
                                                                 float("-inf"))
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
    weights = logits.softmax(dim=-1).to(q.dtype).view(b, h, lq, lk)  # (B, H, Lq, Lk)
    dropped = F.dropout(weights, dropout) if dropout > 0 else weights
    out = dropped @ v                                              # (B, H, Lq, D)
    extra = pe.value_term(dropped, q_pos, k_pos, causal)
    if extra is not None:
        out = out + extra
    return out, (weights if need_weights else None)
