"""TUPE: untied positional encoding (Ke, He & Liu, 2021), with a T5 relative bias (TUPE-R).

Word and position correlations get separate projections instead of sharing W_Q, W_K:

    s_ij = q_i.k_j / sqrt(2d) + (p_i U_Q).(p_j U_K) / sqrt(2d) + b_T5(j - i)

p is a learned absolute table (LayerNorm applied, as in the authors' code), U_Q and U_K are
per-head projections with bias; p, U and the T5 bias are shared by all layers (computed once
in the reference code). The [CLS] untying of the paper is not included (no [CLS] here).

How it is computed: the positional correlation is not a function of j - i, so it cannot be
gathered from a distance table. ``transform_qk`` appends the per-head vectors p_i U_Q to the
queries and p_j U_K to the keys: q'.k' = q.k + (p_i U_Q).(p_j U_K), and the one softmax
scale 1/sqrt(2d) covers both terms exactly, on every backend (sdpa and FlexAttention accept
a value head width different from the query/key width). The T5 bias comes from
:class:`~posenc.encodings.t5.T5Encoding` (same options, same distance-table score_mod). The
KV cache keeps raw keys (width D) and re-appends the key positions (cache_transformed_keys =
False). Positions must lie in the table [0, max_len).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import UserError
from .absolute import LearnedEncoding
from .base import heads_first, register
from .context import HookContext
from .limits import PositionLimit, learned_table
from .t5 import T5Encoding


@register("tupe")
class TUPEEncoding(T5Encoding):
    """Untied absolute position correlation plus a bucketed relative bias (TUPE-R).

    Options: those of ``t5`` (``bidirectional``, ``num_buckets``, ``max_distance``) for the
    relative bias; ``max_len`` sizes the absolute table (required).
    """

    family = "relative"
    extrapolates = "no (absolute table of max_len positions)"
    distance_only = False                      # the absolute correlation reads positions
    cache_note = "exact (raw keys cached; position dims re-appended)"
    cache_transformed_keys = False

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        if self.max_len is None:
            raise UserError("tupe needs max_len (the size of its absolute table), a "
                             "positive int")
        width = self.n_heads * self.head_dim
        self.absolute = LearnedEncoding(n_heads=self.n_heads, head_dim=self.head_dim,
                                        max_len=self.max_len)
        self.pos_norm = nn.LayerNorm(width)
        self.pos_proj = nn.Linear(width, 2 * width)                   # [U_Q | U_K]
        nn.init.normal_(self.pos_proj.weight, std=0.02)               # BERT's init, as TUPE
        nn.init.zeros_(self.pos_proj.bias)

    def sm_scale(self) -> float:
        return 1.0 / math.sqrt(2 * self.head_dim)

    @property
    def position_limit(self) -> PositionLimit:
        """The absolute table's last row."""
        return learned_table(self.max_len, self.name)

    def check_positions(self, pos: Tensor) -> None:
        """UserError if any position lies outside the absolute table [0, max_len)."""
        self.absolute.check_positions(pos)

    def position_heads(self, pos: Tensor, side: int, dtype: torch.dtype) -> Tensor:
        """p U_Q (side 0) or p U_K (side 1) at positions pos (L,) or (B, L): (H, L, D) or
        (B, H, L, D). LayerNorm and projection act row by row, so when (B, L) positions are
        at least as many as the table's rows, the whole table is projected once and each
        sequence gathers its rows (a choice by shapes alone)."""
        self.check_positions(pos)
        width = self.n_heads * self.head_dim
        rows = slice(side * width, (side + 1) * width)
        weight, bias = self.pos_proj.weight[rows], self.pos_proj.bias[rows]
        if pos.dim() == 2 and self.max_len <= pos.numel():
            table = F.linear(self.pos_norm(self.absolute.table), weight, bias)  # (max_len, C)
            p = F.embedding(pos, table)                                        # (B, L, C)
        else:
            p = F.linear(self.pos_norm(self.absolute.table[pos]), weight, bias)  # ([B,] L, C)
        return heads_first(p.to(dtype), self.n_heads)

    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        q_pos, k_pos = at.q_pos, at.k_pos
        pq = self.position_heads(q_pos, 0, q.dtype)                   # ([B,] H, Lq, D)
        pk = self.position_heads(k_pos, 1, k.dtype)                   # ([B,] H, Lk, D)
        return (torch.cat((q, pq.expand(q.shape[0], -1, -1, -1)), dim=-1),
                torch.cat((k, pk.expand(k.shape[0], -1, -1, -1)), dim=-1))  # (B, H, L, 2D)
