"""CoPE: contextual position encoding (Golovneva et al., 2024).

Golovneva, Wang, Weston and Sukhbaatar, "Contextual Position Encoding: Learning to Count
What's Important", arXiv 2405.18719, 2024, Section 3 and Appendix B (reference code).
Positions are counted by the content: each query i gates every key j it sees,

    g_ij = sigmoid(s_ij),   s_ij = q_i . k_j / sqrt(D)     (the scaled logit, 0 when hidden)
    p_ij = sum_{t=j..i} g_it                                  (reverse running sum)

so p_ij counts the keys between j and i that the query "attends to" (words, sentences, a
token type: whatever the gates learn), and the position term is a learned embedding
e[p] in R^D interpolated between the integer positions around p:

    z_ij = q_i . e[p_ij] = (p - floor p) q_i . e[ceil p] + (1 - p + floor p) q_i . e[floor p],

added (unscaled) to the scaled logit. p is clamped to ``max_pos`` - 1, so only ``max_pos``
embeddings exist and the products q_i . e[p] are computed once per query (B, H, Lq, max_pos)
and gathered. The embeddings are shared by the heads, one table per layer, initialised to
zero (as the reference code and x-transformers' ``CoPE``).

The term depends on q . k of every pair between the key and the query (a reduction along the
keys), so there is no FlexAttention score_mod: sdpa (materialized (B, H, Lq, Lk) term) and
eager. Positions are never read: the keys' order is the context (queries are the last Lq
keys, cached keys first, so cached decoding equals a full forward). Keys outside the range
between j and i never enter p_ij, so padding at the edges of a row and other documents
packed before or after change nothing for the real pairs.

``bidirectional`` (an extension for encoders, which the paper does not define): a key after
the query counts the gates from the query to the key, p_ij = sum_{t=i..j} g_it, with the same
embeddings (as the symmetric ALiBi uses |i - j|).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import UserError
from .base import PositionalEncoding, register
from .checks import check_direction, check_qk, require_int_at_least
from .context import HookContext

#: the longest embedding table ``max_pos`` declares (a position counts at most one gate per
#: key, so this is also the longest sequence whose positions all have their own embedding)
MAX_POS = 1 << 16


@register("cope")
class CoPEEncoding(PositionalEncoding):
    """Content-gated positions p_ij (running sums of sigmoid(q.k)), interpolated learned
    embeddings added as q . e[p_ij].

    Options: ``max_pos`` (16: embeddings 0..max_pos-1), ``bidirectional`` (False).
    """

    family = "relative"           # a content-position term q . e[p], as Shaw's q . a_ij
    extrapolates = "yes (positions counted by content, capped at max_pos)"
    per_layer = True
    position_free = True

    def __init__(self, *, max_pos: int = 16, bidirectional: bool = False, **kw) -> None:
        super().__init__(**kw)
        require_int_at_least("max_pos", max_pos, 2)
        if max_pos > MAX_POS:
            raise UserError(f"max_pos must be at most {MAX_POS}, got {max_pos}: CoPE's "
                            "positions count gates, at most one per key, so a longer table "
                            "is never read (and costs max_pos x head_dim parameters a layer)")
        if not isinstance(bidirectional, bool):
            raise UserError(f"bidirectional must be True or False, got {bidirectional!r}")
        self.max_pos, self.bidirectional = max_pos, bidirectional
        self.pos_emb = nn.Parameter(torch.zeros(max_pos, self.head_dim))   # (P, D)

    def gated_positions(self, q: Tensor, k: Tensor, causal: bool) -> Tensor:
        """p_ij (B, H, Lq, Lk) fp32 in [0, max_pos - 1]: the running sums of the gates from
        each key to its query (query i is key i + Lk - Lq)."""
        lq, lk = q.shape[2], k.shape[2]
        logits = torch.matmul(q.float(), k.float().transpose(-1, -2)) * self.sm_scale()
        gates = torch.sigmoid(logits)                                   # (B, H, Lq, Lk)
        rows = torch.arange(lq, device=q.device)[:, None] + (lk - lq)
        keys = torch.arange(lk, device=q.device)[None, :]
        upto = gates.masked_fill(keys > rows, 0.0)                      # keys j <= i
        pos = upto.flip(-1).cumsum(-1).flip(-1)                         # sum_{t=j..i}
        if not causal:
            after = gates.masked_fill(keys < rows, 0.0).cumsum(-1)      # sum_{t=i..j}
            pos = torch.where(keys > rows, after, pos)
        return pos.clamp(max=self.max_pos - 1)

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor:
        check_qk(self, q, k, at)
        if q.shape[1] != k.shape[1] or q.shape[1] != self.n_heads:
            raise UserError(f"cope needs q and k with the encoding's n_heads={self.n_heads} "
                            f"heads, got {q.shape[1]} and {k.shape[1]}")
        check_direction(self, at.causal)
        pos = self.gated_positions(q, k, at.causal)                     # (B, H, Lq, Lk)
        per_pos = torch.matmul(q.float(), self.pos_emb.float().T)       # (B, H, Lq, P)
        floor = pos.floor()
        frac = pos - floor
        low = per_pos.gather(-1, floor.long())
        high = per_pos.gather(-1, pos.ceil().long())
        return high * frac + low * (1.0 - frac)                         # (B, H, Lq, Lk)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, max_pos={self.max_pos}, "
                f"bidirectional={self.bidirectional}")
