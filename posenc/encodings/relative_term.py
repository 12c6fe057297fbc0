"""One declaration per relative score term, and every form attention reads it in.

A relative term adds to the logit of query i and key j a value looked up in a per-distance
table, at the row of the distance delta = q_pos_i - k_pos_j. An encoding declares each term
once as a :class:`RelativeTerm`:

- its side: ``"query"`` (DeBERTa's c2p, Shaw's key term, Transformer-XL's position term):
  table (B, H, Lq, R) = x_q . heads[r], read per query row; ``"key"`` (DeBERTa's p2c):
  table (B, H, Lk, R) = x_k . heads[r], read per key row;
- ``x`` (B, H, L, D), the queries or keys as the term reads them, and ``heads``, the builder
  of the per-row vectors over requested table rows (H, R, D), or (R, D) shared by the heads;
- the distance-to-row map: :meth:`RelativeTerm.clipped` (Shaw: K - clip(delta, -K, K)),
  :meth:`RelativeTerm.bounded` (any map onto a table of n_rows, e.g. DeBERTa's log buckets),
  or :meth:`RelativeTerm.unbounded` (the row is the distance itself, Transformer-XL).

The functions below derive the forms from the declarations alone, summing the terms:
:func:`gathered_bias` (any positions), :func:`strided_bias` (consecutive positions, read
through strided views, kernels/layouts/relative_shift.py), :func:`fused_relative_bias` (a
causal square block written straight into fused attention's logits: the clipped pairs of
kernels/layouts/clipped_pairs.py for one clipped query-side term, the row-group pair kernels
of kernels/layouts/causal_pairs.py for a query-side plus a key-side bounded term),
:func:`relative_bias` (the cheapest exact materialized form) and :func:`relative_score_mod`
(FlexAttention). All are exact; they differ in cost only. A term whose heads are value
vectors (Shaw's A^V) is read the other way round, weights into rows: :func:`relative_value_sum`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor

from ..errors import UserError
from ..kernels.layouts.causal_pairs import CausalPairBias, causal_pair_bias
from ..kernels.layouts.clipped_pairs import ClippedPairBias, collect_clipped, spread_clipped
from ..kernels.layouts.relative_shift import PairLayout, distance_span, head_table
from ..kernels.pairs import pair_kernel_ready
from .base import ScoreMod, pairs_per_head, position_reader
from .context import HookContext

SIDES = ("query", "key")


def clipped_rows(delta: Tensor, clip: int) -> Tensor:
    """Shaw's table row of signed distances q_pos - k_pos: K - clamp(delta, -K, K), in
    0..2K (any int shape -> same shape)."""
    return clip - delta.clamp(-clip, clip)


@dataclass(frozen=True)
class RelativeTerm:
    """One relative term, declared once (module docstring). Build with :meth:`clipped`,
    :meth:`bounded` or :meth:`unbounded`.

    Attributes:
        side: "query" (a row per query) or "key" (a row per key).
        x: (B, H, L, D) the queries (query side) or keys (key side) the table is made of;
            None for a value term (read by :func:`relative_value_sum` only).
        heads: table rows (R,) long, or None for all n_rows -> (H, R, D), or (R, D) shared
            by the heads.
        row_of: signed distances q_pos - k_pos (any int shape) -> table rows (same shape);
            None: the row is the distance (unbounded table).
        n_rows: rows of a bounded table, None when unbounded.
        clip: K when row_of is K - clamp(delta, -K, K) (Shaw), else None.
        scale: multiplies the table after the product (None: folded into ``heads``).
        row_cache: a dict the encoding owns, where the fused causal form keeps the rows of
            a block's distances (they depend on its length alone); None: computed per call.
    """

    side: str
    x: Tensor | None
    heads: Callable[[Tensor | None], Tensor]
    row_of: Callable[[Tensor], Tensor] | None = None
    n_rows: int | None = None
    clip: int | None = None
    scale: float | None = None
    row_cache: dict | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.side not in SIDES:
            raise UserError(f"side must be 'query' or 'key', got {self.side!r}")
        if (self.row_of is None) != (self.n_rows is None):
            raise UserError("a relative term needs both row_of and n_rows, or neither "
                             "(unbounded)")

    @classmethod
    def clipped(cls, side: str, x: Tensor, heads, clip: int, scale: float | None = None
                ) -> RelativeTerm:
        """Shaw's clipped distances: row K - clamp(delta, -K, K) of 2K + 1 (row 0 holds
        delta >= K, row K delta = 0)."""
        return cls(side, x, heads, functools.partial(clipped_rows, clip=clip), 2 * clip + 1,
                   clip, scale)

    @classmethod
    def bounded(cls, side: str, x: Tensor, heads, row_of, n_rows: int,
                scale: float | None = None, row_cache: dict | None = None) -> RelativeTerm:
        """Any map of distances onto the n_rows rows of a table (e.g. log buckets)."""
        return cls(side, x, heads, row_of, n_rows, None, scale, row_cache)

    @classmethod
    def unbounded(cls, side: str, x: Tensor, heads, scale: float | None = None
                  ) -> RelativeTerm:
        """Rows are the distances themselves; ``heads`` builds them for any distances."""
        return cls(side, x, heads, None, None, None, scale)

    def table(self, rows: Tensor | None = None) -> Tensor:
        """x against the heads of ``rows`` (R,), or of every row: (B, H, L, R)."""
        heads = self.heads(rows)
        out = head_table(self.x, heads) if heads.dim() == 3 else self.x @ heads.t()
        return out if self.scale is None else out * self.scale


def _offset_rows(terms: Sequence[RelativeTerm], q_pos: Tensor, k_pos: Tensor
                 ) -> tuple[list[Tensor], list[Callable[[Tensor], Tensor]]]:
    """Each term's table over the rows any pair can read, and its distance-to-column map:
    a bounded term's whole table, an unbounded term's table over the span of distances."""
    tables, columns = [], []
    span = None
    for term in terms:
        if term.row_of is not None:
            tables.append(term.table())
            columns.append(term.row_of)
            continue
        if span is None:
            span = distance_span(q_pos, k_pos)
        lo, hi = span
        tables.append(term.table(torch.arange(lo, hi + 1, device=term.x.device)))
        columns.append(lambda delta, lo=lo: delta - lo)
    return tables, columns


def gathered_bias(terms: Sequence[RelativeTerm], q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """The terms' sum at every pair by gathers: positions (Lq,), (Lk,) or (B, Lq), (B, Lk)
    -> (B, H, Lq, Lk)."""
    tables, columns = _offset_rows(terms, q_pos, k_pos)
    delta = q_pos[..., :, None] - k_pos[..., None, :]                   # ([B,] Lq, Lk)
    bias = 0
    for term, table, column in zip(terms, tables, columns):
        index = pairs_per_head(column(delta))                         # (1|B, 1, Lq, Lk)
        if term.side == "key":
            index = index.transpose(-2, -1)                           # (1|B, 1, Lk, Lq)
        read = table.gather(-1, index.expand(*table.shape[:2], *index.shape[2:]))
        bias = bias + (read if term.side == "query" else read.transpose(-2, -1))
    return bias


def strided_bias(terms: Sequence[RelativeTerm], layout: PairLayout) -> Tensor:
    """The terms' sum for the positions of ``layout`` from tables over its distances, read
    through its strided views (no gathers unless the layout's kind is "gather"):
    (B, H, Lq, Lk)."""
    bias = 0
    for term in terms:
        distances = layout.query_distances if term.side == "query" else layout.key_distances
        rows = distances if term.row_of is None else term.row_of(distances)
        table = term.table(rows)
        bias = bias + (layout.query_rows(table) if term.side == "query"
                       else layout.key_rows(table))
    return bias


def _layout_distances(at: HookContext, kind: str) -> int:
    """How many distances a strided layout's tables hold."""
    lq, lk = at.q_pos.shape[-1], at.k_pos.shape[-1]
    return lq if kind == "causal" else lq + lk - 1


def _causal_pair_terms(terms: Sequence[RelativeTerm], length: int
                       ) -> tuple[RelativeTerm, RelativeTerm] | None:
    """A query-side and a key-side bounded term whose tables hold ``length`` distances (the
    row-group pair kernels' case), or None."""
    if len(terms) != 2 or {t.side for t in terms} != set(SIDES):
        return None
    query, key = sorted(terms, key=lambda t: SIDES.index(t.side))
    if any(t.n_rows is None or length > t.n_rows for t in (query, key)):
        return None
    return query, key


def _block_rows(term: RelativeTerm, distances: Tensor) -> Tensor:
    """The table rows of a causal block's distances (N,), from ``term.row_cache`` when it
    has them. Eager calls only (the pair kernels decline while compiling)."""
    if term.row_cache is None:
        return term.row_of(distances)
    key = (term.side, distances.numel(), str(distances.device))
    if key not in term.row_cache:
        term.row_cache[key] = term.row_of(distances)
    return term.row_cache[key]


def _causal_clipped_table(terms: Sequence[RelativeTerm]) -> Tensor | None:
    """For one clipped query-side term over a causal block (pairs j <= i: rows K..0 hold
    distances 0..>=K), its table over rows 0..K: (B, H, L, K + 1); else None."""
    if len(terms) != 1 or terms[0].side != "query" or terms[0].clip is None:
        return None
    term = terms[0]
    return term.table(torch.arange(term.clip + 1, device=term.x.device))


def fused_relative_bias(terms: Sequence[RelativeTerm], at: HookContext
                        ) -> ClippedPairBias | CausalPairBias | None:
    """The terms over a causal square block as a bias fused attention writes into its logits
    (encodings.base.FusedBias), or None where no kernel covers these terms."""
    if at.layout_kind() != "causal":
        return None
    clipped = _causal_clipped_table(terms)
    if clipped is not None:
        return ClippedPairBias(clipped, terms[0].clip)
    pair = _causal_pair_terms(terms, at.q_pos.shape[-1])
    if pair is None or not pair_kernel_ready(pair[0].x, pair[1].x):
        return None
    layout = at.pair_layout()
    query, key = pair
    return causal_pair_bias(query.x, key.x,
                            query.heads(_block_rows(query, layout.query_distances)),
                            key.heads(_block_rows(key, layout.key_distances)))


def relative_bias(terms: Sequence[RelativeTerm], at: HookContext) -> Tensor:
    """The terms' sum as a (B, H, Lq, Lk) tensor by the cheapest exact form: a causal
    block's kernel, the strided views where the layout's distances fit every bounded
    table, the gathers otherwise."""
    kind = at.layout_kind()
    if kind == "causal":
        clipped = _causal_clipped_table(terms)
        if clipped is not None:
            return spread_clipped(clipped, terms[0].clip)            # (B, H, L, L)
        fused = fused_relative_bias(terms, at)
        if fused is not None:
            return fused.materialize()                                # (B, H, L, L)
    if kind != "gather":
        distances = _layout_distances(at, kind)
        if all(t.n_rows is None or distances <= t.n_rows for t in terms):
            return strided_bias(terms, at.pair_layout())
    return gathered_bias(terms, at.q_pos, at.k_pos)


def relative_score_mod(terms: Sequence[RelativeTerm], q_pos: Tensor, k_pos: Tensor
                       ) -> ScoreMod:
    """A FlexAttention score_mod adding the terms, read from tables of O(n) rows per head:
    no (H, Lq, Lk) tensor is built."""
    tables, columns = _offset_rows(terms, q_pos, k_pos)
    sides = [term.side == "query" for term in terms]
    q_at, k_at = position_reader(q_pos), position_reader(k_pos)

    def add_relative_terms(score, b, h, q_idx, kv_idx):
        delta = q_at(b, q_idx) - k_at(b, kv_idx)
        for table, column, query_side in zip(tables, columns, sides):
            score = score + table[b, h, q_idx if query_side else kv_idx, column(delta)]
        return score

    return add_relative_terms


def relative_value_sum(term: RelativeTerm, weights: Tensor, at: HookContext) -> Tensor:
    """sum_j w_ij heads[row(q_pos_i - k_pos_j)] for a query-side bounded term whose heads
    are value vectors (the adjoint of its pair read): weights (B, H, Lq, Lk) -> (B, H, Lq, D).
    The weights are summed per table row first, (B, H, Lq, R), then multiplied by the heads
    once, so no (Lq, Lk, D) tensor is built: over a causal block of a clipped term by the
    clipped pairs' collect pass (hidden weights are zero), otherwise by a scatter-add."""
    if term.side != "query" or term.row_of is None:
        raise UserError("relative_value_sum needs a query-side bounded term")
    if at.layout_kind() == "causal" and term.clip is not None:
        per_row = collect_clipped(weights, term.clip)                # (B, H, L, K + 1)
        return per_row @ term.heads(torch.arange(term.clip + 1, device=weights.device))
    rows = term.row_of(at.q_pos[..., :, None] - at.k_pos[..., None, :])   # ([B,] Lq, Lk)
    index = pairs_per_head(rows).expand_as(weights)
    per_row = weights.new_zeros(*weights.shape[:3], term.n_rows)
    per_row = per_row.scatter_add(-1, index, weights)                 # (B, H, Lq, R)
    return per_row @ term.heads(None)                                 # (B, H, Lq, D)
