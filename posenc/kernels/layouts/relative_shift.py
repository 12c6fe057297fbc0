"""Per-pair terms read from per-distance tables without a gather (the relative shift).

A term f(row, q_pos_i - k_pos_j) that an encoding computes as a table over distances,
(..., rows, N) with one column per distance, becomes an (..., Lq, Lk) tensor by indexing.
When both position sets are consecutive (training, prefill), the distance of pair (i, j) is
a fixed offset plus i - j, so each row of the result is a window of its table row that
slides one column per row: a strided view of the table (Transformer-XL's relative shift),
with no index tensor.

:func:`pair_layout` picks how, from what the caller knows about the positions (host values:
whether they are consecutive runs, whether queries and keys are the same tensor, whether
attention is causal), never from their values:

- ``"causal"``: the same consecutive positions for queries and keys under a causal mask
  (training). Only distances 0..L-1 are visible, so tables have L columns instead of 2L - 1.
  Reads at hidden pairs (k_pos > q_pos) land on other table entries: they hold unspecified
  finite values, which the attention masks, and get no gradient. Forward and backward are
  strided copies (:class:`_CausalQueryRows`, :class:`_CausalKeyRows`).
- ``"window"``: consecutive positions otherwise: all Lq + Lk - 1 distances, exact everywhere.
  The distances are a tensor offset by q_pos[0] - k_pos[-1]: no value is read on the host.
- ``"gather"``: any positions: an index per pair into a table over the span of distances,
  which reads the positions' extremes on the host (a device synchronisation on GPUs).
  Encodings with a bounded table (clipped or bucketed distances) index it directly instead.

Query-row tables (one row per query, e.g. q . K^r) take their columns in
``layout.query_distances`` order, key-row tables (one row per key, e.g. k . Q^r) in
``layout.key_distances`` order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ...errors import UserError


def distance_span(q_pos: Tensor, k_pos: Tensor) -> tuple[int, int]:
    """Smallest and largest distance q_pos_i - k_pos_j (read on the host)."""
    return int(q_pos.min()) - int(k_pos.max()), int(q_pos.max()) - int(k_pos.min())


def sliding_window(table: Tensor, width: int, first: int, step: int) -> Tensor:
    """Rows r of ``table`` (..., R, N) read at columns first + step * r + t, t < width:
    (..., R, width). ``step`` is -1, 0 or 1 columns per row, all reads inside each row."""
    rows, n = table.shape[-2:]
    last = first + step * (rows - 1)
    if min(first, last) < 0 or max(first, last) + width > n:
        raise UserError(f"window of {width} columns from {first}, step {step}, leaves the "
                         f"{n} columns of the table")
    if table.stride()[-2:] != (n, 1):
        table = table.contiguous()
    return table.as_strided((*table.shape[:-1], width), (*table.stride()[:-2], n + step, 1),
                            table.storage_offset() + first)


# ------------------------------------------------------- causal, square tables
# The tables and gradients below are (..., L, L) with contiguous rows; their leading dims keep
# whatever strides they have (head_table's results are laid out head-major), and each
# gradient is laid out like its table, so the products that made the table need no copy.
def _square(x: Tensor) -> tuple[Tensor, int]:
    """x (..., L, L) with each matrix contiguous (copied only if it is not), and L."""
    n = x.shape[-1]
    if x.stride()[-2:] != (n, 1):
        x = x.contiguous()
    return x, n


def _like(meta: Tensor, device: torch.device, dtype: torch.dtype) -> Tensor:
    """An uninitialized tensor with the shape and (dense) layout of the meta tensor."""
    return torch.empty_like(meta, device=device, dtype=dtype)


def _pair_columns(n: int, device: torch.device, query_rows: bool) -> Tensor:
    """(L, L) float, 1 where column c of table row r belongs to a visible pair, else 0."""
    r = torch.arange(n, device=device)
    first = (n - 1 - r)[:, None]
    keep = r[None, :] >= first if query_rows else r[None, :] <= first
    return keep.float()


class _CausalQueryRows(torch.autograd.Function):
    """table (..., L, L), column c = distance L - 1 - c -> out[i, j] = table[i, L - 1 - i + j]
    for j <= i (a view of the table; j > i unspecified)."""

    @staticmethod
    def forward(ctx, table: Tensor) -> Tensor:
        t, n = _square(table)
        ctx.meta = torch.empty_like(t, device="meta")
        return t.as_strided(t.shape, (*t.stride()[:-2], n - 1, 1), t.storage_offset() + n - 1)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        g, n = _square(grad)
        # grad_table[i, c] = grad[i, c + i - (L - 1)]: rows L + 1 apart in the gradient; the
        # columns c < L - 1 - i have no pair (zeroed). Row 0 would start before its matrix,
        # and has a single pair (c = L - 1, j = 0).
        out = _like(ctx.meta, g.device, g.dtype)
        out[..., 0, :].zero_()
        out[..., 0, n - 1] = g[..., 0, 0]
        if n > 1:
            rows = g.as_strided((*g.shape[:-2], n - 1, n), (*g.stride()[:-2], n + 1, 1),
                                g.storage_offset() + 2)
            torch.mul(rows, _pair_columns(n, g.device, True)[1:].to(g.dtype),
                      out=out[..., 1:, :])
        return out


class _CausalKeyRows(torch.autograd.Function):
    """table (..., L, L), row j = key j, column c = distance c -> out[i, j] = table[j, i - j]
    for j <= i (a transposed view of the table; j > i unspecified)."""

    @staticmethod
    def forward(ctx, table: Tensor) -> Tensor:
        t, n = _square(table)
        ctx.meta = torch.empty_like(t, device="meta")
        by_key = t.as_strided(t.shape, (*t.stride()[:-2], n - 1, 1),   # [j, i] = table[j, i - j]
                              t.storage_offset())
        return by_key.transpose(-2, -1)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        # grad_table[j, c] = grad[j + c, j]: row step L + 1, column step L. The columns
        # c > L - 1 - j have no pair (zeroed); their reads run into the next matrix in
        # memory, so the matrices of the last index of the first dim read from a copy with
        # one zero matrix after it.
        g = grad.contiguous()
        n = g.shape[-1]
        lead = g.shape[:-2]
        if not lead:
            g, lead = g.unsqueeze(0), (1,)
        out = _like(ctx.meta, g.device, g.dtype).view(*lead, n, n)
        keep = _pair_columns(n, g.device, False).to(g.dtype)
        step = (*g.stride()[:-2], n + 1, n)
        if lead[0] > 1:
            rows = g.as_strided((lead[0] - 1, *lead[1:], n, n), step, g.storage_offset())
            torch.mul(rows, keep, out=out[:-1])
        last = g[-1:]
        tail = g.new_zeros(last.numel() + n * n)
        tail[:last.numel()].copy_(last.reshape(-1))
        rows = tail.as_strided(last.shape, step, 0)
        torch.mul(rows, keep, out=out[-1:])
        return out.view(grad.shape)


def head_table(x: Tensor, heads: Tensor) -> Tensor:
    """Per head, every row of x against every row of heads: x (B, H, L, D), heads (H, N, D)
    -> (B, H, L, N). One (B * L, D) x (D, N) product per head (no per-batch broadcast copy
    of ``heads``); when x is the attention's view of a (B, L, H, D) projection, its rows are
    read in place. The result is laid out head-major, (H, B, L, N) in memory."""
    b, h, length, d = x.shape
    rows = x.transpose(0, 1).reshape(h, b * length, d)
    return torch.bmm(rows, heads.transpose(1, 2)).view(h, b, length, -1).transpose(0, 1)


# ---------------------------------------------------------------- the layout
@dataclass
class PairLayout:
    """How per-distance tables become (..., Lq, Lk) pair terms; see the module docstring."""

    kind: str                       # "causal", "window" or "gather"
    query_distances: Tensor         # (N,) distance of each column of a query-row table
    key_distances: Tensor           # (N,) distance of each column of a key-row table
    index: Tensor | None = None     # (Lq, Lk) column of each pair ("gather")

    def query_rows(self, table: Tensor) -> Tensor:
        """table (..., Lq, N) -> (..., Lq, Lk): pair (i, j) reads row i at distance(i, j)."""
        if self.kind == "causal":
            return _CausalQueryRows.apply(table)
        if self.kind == "window":
            lq, n = table.shape[-2:]
            return sliding_window(table, n - lq + 1, lq - 1, -1)
        return table.gather(-1, self.index.expand(*table.shape[:-2], *self.index.shape))

    def key_rows(self, table: Tensor) -> Tensor:
        """table (..., Lk, N) -> (..., Lq, Lk): pair (i, j) reads row j at distance(i, j)."""
        if self.kind == "causal":
            return _CausalKeyRows.apply(table)
        if self.kind == "window":
            lk, n = table.shape[-2:]
            return sliding_window(table, n - lk + 1, lk - 1, -1).transpose(-2, -1)
        index_t = self.index.t()
        return table.gather(-1, index_t.expand(*table.shape[:-2], *index_t.shape)
                            ).transpose(-2, -1)

    def pair_sum(self, query_table: Tensor, key_table: Tensor) -> Tensor:
        """query_rows(query_table) + key_rows(key_table): (..., Lq, Lk)."""
        return self.query_rows(query_table) + self.key_rows(key_table)


def layout_kind(q_pos: Tensor, k_pos: Tensor, causal: bool = False,
                consecutive: bool = False) -> str:
    """"causal", "window" or "gather" (module docstring), from host facts only: whether the
    caller promises consecutive positions, whether q_pos is k_pos, and causal."""
    if not consecutive:
        return "gather"
    if causal and q_pos is k_pos and q_pos.shape[-1] > 1:
        return "causal"
    return "window"


def pair_layout(q_pos: Tensor, k_pos: Tensor, causal: bool = False,
                consecutive: bool = False) -> PairLayout:
    """The cheapest exact layout for these positions (q_pos (Lq,), k_pos (Lk,));
    ``consecutive``: the caller knows both are runs p0, p0 + 1, ..."""
    kind = layout_kind(q_pos, k_pos, causal, consecutive)
    device = q_pos.device
    if kind == "causal":
        rising = torch.arange(q_pos.shape[-1], device=device)
        return PairLayout("causal", rising.flip(0), rising)
    if kind == "window":
        offset = q_pos[0] - k_pos[-1]                                    # 0-d tensor
        rising = torch.arange(q_pos.shape[-1] + k_pos.shape[-1] - 1, device=device) + offset
        return PairLayout("window", rising.flip(0), rising)
    lo, hi = distance_span(q_pos, k_pos)
    rising = torch.arange(lo, hi + 1, device=device)
    index = q_pos[:, None] - k_pos[None, :] - lo                      # (Lq, Lk)
    return PairLayout("gather", rising, rising, index)
