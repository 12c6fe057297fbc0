"""Stick-breaking attention: the softmax replaced by a stick broken from the nearest key back.

Tan, Shen, Yang, Courville and Panda, "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study", ICLR 2025 (arXiv 2410.17980), section 2: query i gives
each earlier key j the share

    A_ij = beta_ij * prod_{j<k<i} (1 - beta_ik),        beta_ij = sigmoid(z_ij),
    z_ij = q_i . k_j / sqrt(d),

so the nearest key with a high logit takes most of the stick and the keys behind it get
what is left: order enters through the product, and no positional encoding is needed. The
weights of a row sum to at most 1. Section 3 computes them in log space (the products of
many factors near 0 or 1 underflow): with log(1 - beta) = -softplus(z) = logsigmoid(-z),

    log A_ij = logsigmoid(z_ij) + sum_{j<k<i} logsigmoid(-z_ik),

a reversed cumulative sum along the keys, taken here as one product with a triangular
matrix of ones (one GEMM instead of flip, cumsum, flip; log(beta) as z + log(1 - beta)), in
float32 (float64 for float64 inputs), equal to fla's reference ``naive_stickbreaking_attn``
(fla-core 0.6) in the tests.

What is left of the stick, ``1 - sum_j A_ij``: the authors' reference code
(github.com/shawntan/stickbreaking-attention, its tests' ``ref_fwd``) adds it times the
query's own value, ``o_i = sum_j A_ij v_j + rem_i v_i`` (``remainder="self"``, the default
here, so the first token reads itself); fla's layer drops it (``remainder="drop"``).
``attend_current`` lets the stick reach the query's own key too (j <= i; fla's option).

Why it is an attention *form* and not an encoding: a :class:`PositionalEncoding` supplies
terms around a softmax (q/k transforms, logits added, a temperature, a value term); stick-
breaking replaces the softmax itself, so it is chosen per model (``LMConfig.attn_form``)
and composes with every encoding whose hooks act on q and k or on the input (NoPE, the
rotary family, absolute embeddings, a temperature) while attention keeps calling the hooks
as before. An additive bias (ALiBi, T5, FIRE, the forget gate, ...), a value term (Shaw)
and sink logits are terms of a softmax's logits or denominator that the stick has no place
for: such encodings are refused (:func:`check_composes`), naming the reason.

The KV cache is the ordinary one: a query's row needs only the keys and values up to it
(the queries are the last Lq keys), so cached decoding equals the full forward. Memory: the
(B, H, Lq, Lk) logits are processed ``QUERY_CHUNK_ELEMENTS`` at a time over the queries,
each row being independent.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..encodings.base import PositionalEncoding
from ..errors import UserError
from .context import AttentionCall
from .masks import causal_visible

#: the attention forms a model may choose
ATTN_FORMS = ("softmax", "stick_breaking")
#: what happens to a row's leftover stick (module docstring)
REMAINDERS = ("self", "drop")
#: logits entries (B * H * rows * Lk) computed at once; query rows beyond are chunked
QUERY_CHUNK_ELEMENTS = 1 << 24
#: the hooks stick-breaking cannot honour, and why (``check_composes``)
_REFUSED_HOOKS = {
    "score_bias": "adds a bias to softmax logits",
    "score_mod": "adds a bias to softmax logits",
    "fused_bias": "adds a bias to softmax logits",
    "value_term": "adds a value term weighted by softmax weights",
}


def check_composes(encoding_cls: type[PositionalEncoding], sinks: bool = False) -> None:
    """UserError unless stick-breaking attention can run with encodings of this class (and
    sink logits when ``sinks``): see the module docstring."""
    for hook, why in _REFUSED_HOOKS.items():
        if encoding_cls.overrides(hook):
            raise UserError(
                f"attn_form 'stick_breaking' cannot compose with encoding "
                f"{encoding_cls.name!r}: it {why}, and stick-breaking has no softmax; use "
                f"an encoding that acts on q/k or the input (nope, rope, ...)")
    if sinks:
        raise UserError("attn_form 'stick_breaking' cannot use attention sinks: a sink "
                        "logit joins a softmax's denominator, and stick-breaking has none")


def stick_breaking_weights(logits: Tensor, visible: Tensor, attend_current: bool = False
                           ) -> tuple[Tensor, Tensor]:
    """Stick-breaking weights from logits, in log space.

    Args:
        logits: z (..., Lq, Lk), already scaled; computed in float32 (float64 kept).
        visible: (..., Lq, Lk) bool, broadcastable: which keys each query sees, its own
            key (index i + Lk - Lq) included; with ``attend_current`` False the own key is
            left out here.
        attend_current: the stick reaches the query's own key too.

    Returns the weights A (..., Lq, Lk) and the leftover stick (..., Lq) = 1 - sum_j A_ij.
    Hidden keys leave the stick as it is (they break nothing).
    """
    z = logits if logits.dtype == torch.float64 else logits.float()
    lq, lk = z.shape[-2], z.shape[-1]
    if not attend_current:                       # key j < i + Lk - Lq only
        visible = visible & torch.ones(lq, lk, dtype=torch.bool, device=z.device
                                       ).tril(lk - lq - 1)
    log_keep = F.logsigmoid(-z).masked_fill(~visible, 0.0)          # log(1 - beta)
    later = torch.ones(lk, lk, dtype=z.dtype, device=z.device).tril(-1)   # [k, j]: k > j
    after = torch.matmul(log_keep, later)                          # sum over k > j
    # z + log(1 - beta) = log(beta) where visible; hidden pairs get -inf before exp, so no
    # gradient meets an overflow there
    log_weights = (z + log_keep + after).masked_fill(~visible, float("-inf"))
    return log_weights.exp(), log_keep.sum(-1).exp()


def stick_breaking_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, *,
                             visible: Tensor | None = None, attend_current: bool = False,
                             remainder: str = "self", dropout: float = 0.0,
                             need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
    """Causal stick-breaking attention of q (B, H, Lq, D) over k, v (B, H, Lk, D).

    The queries are the last Lq keys (a KV cache holds the earlier ones). ``visible``
    (B|1, 1|H, Lq, Lk) bool: the keys each query may see (padding, documents, a window),
    causal included; None: causal only. ``remainder``: "self" adds the leftover stick times
    the query's own value, "drop" leaves it out (module docstring); ``dropout`` drops
    weights (not the remainder) with that probability. Returns the output
    (B, H, Lq, D) in v's dtype and, with ``need_weights``, the weights (B, H, Lq, Lk).
    """
    if remainder not in REMAINDERS:
        raise UserError(f"remainder must be one of {', '.join(REMAINDERS)}, got {remainder!r}")
    b, h, lq, d = q.shape
    lk = k.shape[2]
    if lk < lq:
        raise UserError(f"causal attention with {lq} queries over {lk} keys")
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    rows = max(1, QUERY_CHUNK_ELEMENTS // max(1, b * h * lk))
    outs, all_weights = [], []
    for first in range(0, lq, rows):
        last = min(lq, first + rows)
        # queries first..last-1 see keys up to their own: index i + lk - lq
        keys = last + lk - lq
        z = torch.matmul(q[:, :, first:last].to(compute),
                         k[:, :, :keys].to(compute).transpose(-1, -2)) * scale  # (B,H,r,K)
        seen = causal_visible(last - first, keys, q.device)
        if visible is not None:
            seen = seen & visible[..., first:last, :keys]
        weights, rem = stick_breaking_weights(z, seen, attend_current)
        dropped = F.dropout(weights, dropout) if dropout > 0 else weights
        out = torch.matmul(dropped, v[:, :, :keys].to(compute))           # (B, H, r, D)
        if remainder == "self":
            own = v[:, :, first + lk - lq:last + lk - lq].to(compute)      # (B, H, r, D)
            out = out + rem[..., None] * own
        outs.append(out)
        if need_weights:
            all_weights.append(F.pad(weights, (0, lk - keys)))
    out = torch.cat(outs, dim=2).to(v.dtype)                               # (B, H, Lq, D)
    return out, (torch.cat(all_weights, dim=2).to(q.dtype) if need_weights else None)


def stick_breaking_attend(q: Tensor, k: Tensor, v: Tensor, pe: PositionalEncoding,
                          call: AttentionCall) -> tuple[Tensor, Tensor | None]:
    """:func:`stick_breaking_attention` for one self-attention call: the encoding's
    temperature (``attn_scale``) and scale (``sm_scale``), the call's masks; q, k already
    transformed by the encoding; attention dropout drops weights."""
    check_composes(type(pe), call.sinks is not None)
    at = call.at
    if not at.causal:
        raise UserError("attn_form 'stick_breaking' is causal: it needs causal attention")
    q_scale = pe.attn_scale(at)
    if q_scale is not None:
        q = q * q_scale.to(q.dtype)[..., None, :, None]                   # (B, H, Lq, D)
    masks = call.active_masks()
    visible = None if masks is None else masks.visibility(q.shape[2], k.shape[2], q.device,
                                                          causal=True)
    return stick_breaking_attention(q, k, v, pe.sm_scale(), visible=visible,
                                    dropout=call.dropout, need_weights=call.need_weights)
