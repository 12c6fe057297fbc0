"""Clipped-distance tables over a causal square block, spread over the pairs and back.

Shaw-style tables hold one column per clipped distance: column K - min(i - j, K) of row i
for the visible pairs j <= i of a causal square block (queries and keys at the same
consecutive positions), so distances 0..K-1 are diagonals of the (L, L) pair matrix and every
distance >= K shares column 0. Spreading a table over the pairs and summing pairs into a
table are adjoint maps; each runs as one pass over the pairs (a masked write, or a row sum)
plus K diagonal copies, instead of a gather or scatter-add over every pair. Summing needs
the hidden pairs to be zero (attention weights, or the gradient of a masked bias).

Both work on blocks of rows too, so :class:`ClippedPairBias` can hand the spread table to
fused attention (posenc/attention/biased.py), which has it written straight into each block
of its logits (-inf at hidden pairs, no (B, H, L, L) bias tensor) and collects the blocks'
logit gradients back into the table's gradient.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ...errors import UserError


@functools.lru_cache(maxsize=32)
def _pair_masks(n: int, clip: int, device: torch.device, dtype: torch.dtype
                ) -> tuple[Tensor, Tensor]:
    """(L, L) each: 1 where j <= i - K (the shared column) else 0; and -inf where j > i
    (hidden) else 0. Shared: read them, never modify them."""
    r = torch.arange(n, device=device)
    far = (r[None, :] <= r[:, None] - clip).to(dtype)
    hidden = torch.zeros(n, n, device=device, dtype=dtype).masked_fill_(
        r[None, :] > r[:, None], float("-inf"))
    return far, hidden


def _spread_rows(table: Tensor, clip: int, out: Tensor, first: int, masked: bool) -> None:
    """out (..., rows, keys) <- pairs [i, j] = table[i, K - min(i - j, K)] of rows first..
    for j <= i, and 0 (or -inf with ``masked``) for j > i. table (..., L, K + 1)."""
    rows, keys = out.shape[-2:]
    n = table.shape[-2]
    far, hidden = _pair_masks(n, clip, table.device, table.dtype)
    end = first + rows
    column = table[..., first:end, :1]
    if masked:
        torch.addcmul(hidden[first:end, :keys], column, far[first:end, :keys], out=out)
    else:
        torch.mul(column, far[first:end, :keys], out=out)
    for d in range(min(clip, end)):           # distance d: pairs (i, i - d), i >= max(first, d)
        diagonal = out.diagonal(first - d, -2, -1)
        start = max(first, d)
        diagonal.copy_(table[..., start:start + diagonal.shape[-1], clip - d])


def _collect_rows(pairs: Tensor, clip: int, out: Tensor, first: int) -> None:
    """out[..., first:first + rows, :] <- the pairs (..., rows, keys) of rows first.., zero at
    j > i and holding every visible pair of their rows, summed per clipped distance. The
    shared column is the row sum minus the diagonals (one read pass, no masked copy)."""
    rows = pairs.shape[-2]
    end = first + rows
    for d in range(min(clip, end)):
        diagonal = pairs.diagonal(first - d, -2, -1)
        start = max(first, d)
        out[..., start:start + diagonal.shape[-1], clip - d] = diagonal
    out[..., first:end, 0] = pairs.sum(-1) - out[..., first:end, 1:].sum(-1)


def _spread(table: Tensor, clip: int) -> Tensor:
    """table (..., L, K + 1) -> pairs (..., L, L), 0 at hidden pairs."""
    n = table.shape[-2]
    out = table.new_empty(*table.shape[:-1], n)
    _spread_rows(table, clip, out, 0, masked=False)
    return out


def _collect(pairs: Tensor, clip: int) -> Tensor:
    """pairs (..., L, L), zero at j > i -> table (..., L, K + 1)."""
    out = pairs.new_zeros(*pairs.shape[:-1], clip + 1)
    _collect_rows(pairs, clip, out, 0)
    return out


class _Clipped(torch.autograd.Function):
    """``_spread`` or ``_collect``; the backward of each is the other (adjoint maps)."""

    @staticmethod
    def forward(ctx, x: Tensor, clip: int, spread: bool) -> Tensor:
        ctx.clip, ctx.spread = clip, spread
        return (_spread if spread else _collect)(x, clip)

    @staticmethod
    def backward(ctx, grad: Tensor):     # spread's: zero at hidden pairs (attention masks them)
        return (_collect if ctx.spread else _spread)(grad, ctx.clip), None, None


def spread_clipped(table: Tensor, clip: int) -> Tensor:
    """A causal square block's pair term from its clipped-distance table (module docstring):
    (..., L, K + 1) -> (..., L, L), zero at hidden pairs. Differentiable."""
    return _Clipped.apply(table, clip, True)


def collect_clipped(pairs: Tensor, clip: int) -> Tensor:
    """The pairs of a causal square block summed per clipped distance: (..., L, L), zero at
    hidden pairs j > i (attention weights; gradients of a masked bias), -> (..., L, K + 1).
    Differentiable (hidden pairs get no gradient)."""
    return _Clipped.apply(pairs, clip, False)


class ClippedPairBias:
    """``spread_clipped(table, clip)`` for fused attention (encodings.base.FusedBias): the
    table (B, H, L, K + 1) is spread into each block of logits, -inf at hidden pairs."""

    def __init__(self, table: Tensor, clip: int) -> None:
        bsz, heads, n, _ = table.shape
        self.table, self.clip = table, clip
        self.shape = (bsz, heads, n, n)
        self.inputs = (table,)

    def write(self, out: Tensor, first_row: int) -> None:
        _spread_rows(self.table, self.clip, out, first_row, masked=True)

    def grads(self, blocks: list[tuple[int, Tensor]]) -> tuple[Tensor]:
        out = torch.zeros_like(self.table)   # entries of no pair (distance d > i) stay 0
        end = 0
        for first, pairs in blocks:
            if first != end:
                raise UserError("gradient blocks must cover the rows in order")
            _collect_rows(pairs, self.clip, out, first)
            end += pairs.shape[-2]
        return (out,)
