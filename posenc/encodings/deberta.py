"""DeBERTa disentangled attention (He et al., 2021), following DeBERTa-v2's reference code.

Relative positions delta(i, j) = q_pos_i - k_pos_j are log-bucketed (``position_buckets``,
``max_relative_positions``) and clamped to the 2 * span rows of a relative embedding table P
(span = position_buckets, or max_relative_positions without buckets). With per-layer
projections K^r = P W_{K,r} + b and Q^r = P W_{Q,r} + b (Hugging Face's
``share_att_key=False`` path: the encoding cannot see the layer's own W_q, W_k):

    s_ij = [ q_i.k_j + q_i.K^r[r_ij] (c2p) + k_j.Q^r[r_ij] (p2c) ] / sqrt(3 d)

with r_ij = clamp(bucket(delta(i, j)) + span, 0, 2 span - 1). Like the reference, p2c uses
the same index as c2p (the paper writes delta(j, i); the released code gathers at -r(j, i),
which is the same bucket since bucketing is odd). The scale is 1/sqrt(d * (1 + number of
terms)). Both terms gather from tables of O(n) rows per head: q K^r^T (B, H, Lq, 2 span),
k Q^r^T (B, H, Lk, 2 span) and the row of each distinct distance (Lq + Lk - 1,), so a
FlexAttention score_mod never builds an (H, n, n) tensor. For consecutive positions (training,
prefill) spanning at most 2 span distances, ``score_bias`` instead builds the tables over the
distances that occur (0..L-1 for causal training, Lq + Lk - 1 otherwise) and reads them
through strided views (kernels/layouts/relative_shift.py): no gathers, no scatter-add
backward. With both terms over a causal square block (training) and the native pair
kernels, the tables hold only the distances each row group sees, and ``fused_bias`` hands
them to fused attention, which writes the bias straight into its logits
(kernels/layouts/causal_pairs.py). The softmax scale is folded into the (H, rows, D) tables.
Each term is declared once (``relative_terms``: a query-side c2p and a key-side p2c
:class:`~posenc.encodings.relative_term.RelativeTerm` over the bucketed rows); every form
above is derived from the declarations there.

Differences from the reference: each layer has its own table P (and its LayerNorm) where
DeBERTa shares one across layers; no dropout on P. The enhanced mask decoder (EMD) adds
absolute positions to the queries of the last layers, q_i = (h_i + p_i) W_Q. The hooks can
express its query side exactly: ``absolute_query=True`` adds a learned per-position vector
in head space (p_i W_Q, learned directly) to the queries of every layer built with it, so the
c2p term sees it too. What hooks cannot do: add p_i to the layer's residual stream as EMD
does, or pick the last layers; a model chooses which layers get the option.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..kernels.layouts.causal_pairs import CausalPairBias
from .absolute import LearnedEncoding
from .base import PositionalEncoding, ScoreMod, heads_first, register
from .checks import require_float_in, require_int_at_least
from .context import HookContext
from .limits import PositionLimit, learned_table
from .relative_term import RelativeTerm, fused_relative_bias, relative_bias, relative_score_mod

TERMS = ("c2p", "p2c")
LAYER_NORM_EPS = 1e-7           # DeBERTa-v2's layer_norm_eps


def log_ratio(position_buckets: int, max_position: int) -> float:
    """log((max_position - 1) / mid), mid = position_buckets // 2, evaluated in float32 as
    the reference does, returned as a host number."""
    mid = position_buckets // 2
    return float(torch.log(torch.tensor((max_position - 1) / mid, dtype=torch.float32)))


def log_bucket_position(rel: Tensor, position_buckets: int, max_position: int,
                        ratio: float | None = None) -> Tensor:
    """DeBERTa's log buckets of signed distances (any int shape -> same shape, long).

    |rel| <= position_buckets // 2 keeps its value; larger distances map to
    sign * (mid + ceil(log(|rel| / mid) / log((max_position - 1) / mid) * (mid - 1))),
    evaluated in float32 like the reference so bucket edges agree. ``ratio``:
    :func:`log_ratio` if already computed (then no tensor is made here, e.g. inside a
    FlexAttention score_mod).
    """
    mid = position_buckets // 2
    ratio = log_ratio(position_buckets, max_position) if ratio is None else ratio
    magnitude = rel.abs()
    far = magnitude > mid
    safe = torch.where(far, magnitude, torch.full_like(magnitude, mid)).to(torch.float32)
    log_pos = torch.ceil(torch.log(safe / mid) / ratio * (mid - 1)) + mid
    return torch.where(far, log_pos.to(rel.dtype) * torch.sign(rel), rel)


@register("deberta")
class DeBERTaEncoding(PositionalEncoding):
    """Content-to-position and position-to-content terms over log-bucketed distances.

    Options:
        position_buckets: log buckets (256); None: raw distances clamped to
            [-max_relative_positions, max_relative_positions - 1].
        max_relative_positions: distance where the log buckets reach the last row (512).
        pos_att_type: the position terms, "c2p|p2c" (default), "c2p" or "p2c".
        rel_layer_norm: LayerNorm on the relative table (True, DeBERTa-v3's norm_rel_ebd).
        absolute_query: add learned absolute positions to the queries (False; EMD's query
            side, needs max_len).
        init_std: std of the relative table (0.02).
    """

    family = "relative"
    extrapolates = "yes (distances past max_relative_positions share the last bucket)"
    distance_only = True
    per_layer = True

    def __init__(self, *, position_buckets: int | None = 256, max_relative_positions: int = 512,
                 pos_att_type: str = "c2p|p2c", rel_layer_norm: bool = True,
                 absolute_query: bool = False, init_std: float = 0.02, **kw) -> None:
        super().__init__(**kw)
        require_int_at_least("max_relative_positions", max_relative_positions, 1)
        if position_buckets is not None:
            require_int_at_least("position_buckets", position_buckets, 2)
            if max_relative_positions <= position_buckets // 2 + 1:
                raise UserError(
                    f"max_relative_positions must be > position_buckets // 2 + 1 = "
                    f"{position_buckets // 2 + 1} (the log buckets start there), got "
                    f"{max_relative_positions}")
        terms = tuple(t.strip() for t in pos_att_type.split("|")) \
            if isinstance(pos_att_type, str) else ()
        if not terms or len(set(terms)) != len(terms) or not set(terms) <= set(TERMS):
            raise UserError(f"pos_att_type must be 'c2p|p2c', 'c2p' or 'p2c', got "
                             f"{pos_att_type!r}")
        for option, value in (("rel_layer_norm", rel_layer_norm),
                              ("absolute_query", absolute_query)):
            if not isinstance(value, bool):
                raise UserError(f"{option} must be True or False, got {value!r}")
        require_float_in("init_std", init_std, 0.0, float("inf"))
        self.position_buckets = position_buckets
        self.max_relative_positions = max_relative_positions
        self.terms = terms
        self.span = position_buckets if position_buckets is not None else max_relative_positions
        self.log_ratio = None if position_buckets is None else log_ratio(
            position_buckets, max_relative_positions)
        width = self.n_heads * self.head_dim
        self.rel_embeddings = nn.Parameter(torch.randn(2 * self.span, width) * init_std)
        self.rel_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS) if rel_layer_norm else None
        self.pos_key_proj = nn.Linear(width, width) if "c2p" in terms else None
        self.pos_query_proj = nn.Linear(width, width) if "p2c" in terms else None
        for proj in (self.pos_key_proj, self.pos_query_proj):
            if proj is not None:            # BERT's initializer_range, as DeBERTa's release
                nn.init.normal_(proj.weight, std=0.02)
                nn.init.zeros_(proj.bias)
        if absolute_query and self.max_len is None:
            raise UserError("absolute_query needs max_len (the size of its table), a "
                             "positive int")
        self._block_rows: dict = {}           # a causal block's table rows, per length
        self.absolute = LearnedEncoding(n_heads=self.n_heads, head_dim=self.head_dim,
                                        max_len=self.max_len,
                                        init_std=init_std) if absolute_query else None

    @property
    def translation_invariant(self) -> bool:
        return super().translation_invariant and self.absolute is None

    def sm_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim * (1 + len(self.terms)))

    # ------------------------------------------------------------- tables
    def distance_rows(self, rel: Tensor) -> Tensor:
        """Table row of each signed distance in ``rel`` (any int shape -> same shape)."""
        if self.position_buckets is not None:
            rel = log_bucket_position(rel, self.position_buckets, self.max_relative_positions,
                                      self.log_ratio)
        return (rel + self.span).clamp(0, 2 * self.span - 1)

    def pair_rows(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Table row of every (query, key) pair: (Lq,), (Lk,) -> (Lq, Lk); (B, Lq, Lk) for
        positions per sequence."""
        return self.distance_rows(q_pos[..., :, None] - k_pos[..., None, :])

    def normalized_rows(self) -> Callable[[Tensor | None], Tensor]:
        """For the terms of one call: table rows (R,), or None for all 2 span, -> the relative
        table at those rows after its LayerNorm (R, H * D). The norm is row-wise: when the
        terms would normalize 2 span rows or more between them (c2p and p2c ask for the same
        rows), they read one normalization of the whole table, made once per call; fewer
        rows are normalized alone."""
        table, norm, whole = self.rel_embeddings, self.rel_norm, []
        n_terms = len(self.terms)

        def rows_of(rows: Tensor | None) -> Tensor:
            if norm is not None and rows is not None and \
                    rows.numel() * n_terms < 2 * self.span:
                return norm(table.index_select(0, rows))
            if not whole:
                whole.append(table if norm is None else norm(table))
            return whole[0] if rows is None else whole[0].index_select(0, rows)

        return rows_of

    def position_heads(self, proj: nn.Linear, normalized: Callable[[Tensor | None], Tensor],
                       rows: Tensor | None, dtype: torch.dtype) -> Tensor:
        """The relative table projected by ``proj`` (K^r for c2p, Q^r for p2c) per head, times
        the softmax scale: (H, R, D) over all 2 span rows, or over the table rows ``rows``
        (R,), read from ``normalized`` (the call's :meth:`normalized_rows`). Normalization
        and projection are row-wise, so only the rows in use are projected."""
        heads = (proj(normalized(rows)) * self.sm_scale()).to(dtype)   # (R, H * D)
        return heads.view(-1, self.n_heads, self.head_dim).transpose(0, 1)

    def relative_terms(self, q: Tensor, k: Tensor) -> list[RelativeTerm]:
        """The c2p term (query side, q . K^r) and the p2c term (key side, k . Q^r) in
        ``pos_att_type``, over the log-bucketed rows of one normalized table."""
        terms, normalized = [], self.normalized_rows()
        for side, x, proj in (("query", q, self.pos_key_proj), ("key", k, self.pos_query_proj)):
            if proj is not None:
                heads = functools.partial(self.position_heads, proj, normalized, dtype=x.dtype)
                terms.append(RelativeTerm.bounded(side, x, heads, self.distance_rows,
                                                  2 * self.span, row_cache=self._block_rows))
        return terms

    def term_tables(self, q: Tensor, k: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """Scaled c2p table q K^r^T (B, H, Lq, 2 span) and p2c table k Q^r^T (B, H, Lk,
        2 span); None for a term not in ``pos_att_type``."""
        tables = {term.side: term.table() for term in self.relative_terms(q, k)}
        return tables.get("query"), tables.get("key")

    @property
    def position_limit(self) -> PositionLimit | None:
        """``absolute_query``'s table's last row (relative positions alone: no bound)."""
        return None if self.absolute is None else learned_table(self.max_len, self.name)

    def check_positions(self, pos: Tensor) -> None:
        """UserError if ``absolute_query``'s table does not cover every position."""
        if self.absolute is not None:
            self.absolute.check_positions(pos)

    # -------------------------------------------------------------- hooks
    def transform_qk(self, q: Tensor, k: Tensor, at: HookContext) -> tuple[Tensor, Tensor]:
        q_pos = at.q_pos
        if self.absolute is None:
            return q, k
        self.check_positions(q_pos)
        p = heads_first(self.absolute.table[q_pos], self.n_heads)      # ([B,] H, Lq, D)
        return q + p.to(q.dtype), k

    def score_bias(self, q: Tensor, k: Tensor, at: HookContext) -> Tensor:
        return relative_bias(self.relative_terms(q, k), at)          # (B, H, Lq, Lk)

    def fused_bias(self, q: Tensor, k: Tensor, at: HookContext) -> CausalPairBias | None:
        return fused_relative_bias(self.relative_terms(q, k), at)

    def score_mod(self, q: Tensor, k: Tensor, at: HookContext) -> ScoreMod:
        return relative_score_mod(self.relative_terms(q, k), at.q_pos, at.k_pos)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, position_buckets={self.position_buckets}, "
                f"max_relative_positions={self.max_relative_positions}, "
                f"pos_att_type={'|'.join(self.terms)!r}")
