"""A query-row plus a key-row distance term over a causal square block, from tables of the
distances each row group sees, written straight into attention logits.

DeBERTa's bias over a causal square block (queries and keys at positions 0..L-1, pairs
j <= i) is

    bias[b, h, i, j] = C(i, j) + P(j, i),  C(i, j) = q_i . K^r[i - j],  P(j, i) = k_j . Q^r[i - j]

Query i sees distances 0..i and key j distances 0..L-1-j, so full (L, L) distance tables are
half unused. Here the rows are split into groups (:func:`row_groups`); a query group
[a, b) gets a table of its b distances, a key group [a, b) one of its L - a distances: with
four groups, 5/8 of the table products, gradients and memory of full tables. The native pair
kernels (posenc/kernels/pairs.py) address the groups' rows through row specs.

:class:`CausalPairBias` is the resulting (B, H, L, L) term without the (B, H, L, L) tensor:
fused biased attention (posenc/attention/biased.py) has it write each block of its logits
(the bias, with -inf at hidden pairs j > i, in one pass) and hands it the blocks' logit
gradients, which it splits into the groups' table gradients. ``materialize`` builds the
tensor (0 at hidden pairs) for every other path.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ...errors import UserError
from ..pairs import pair_kernel_ready, split_pairs, table_groups, write_pairs

#: most row groups, and fewest rows in a group
MAX_GROUPS, MIN_GROUP_ROWS = 4, 32


def row_groups(n: int) -> tuple[tuple[int, int], ...]:
    """[(first, end)] consecutive row groups covering 0..n-1: at most ``MAX_GROUPS``, each
    a multiple of 8 rows (the kernels' blocks) but the last, at least ``MIN_GROUP_ROWS``."""
    size = -(-n // MAX_GROUPS)
    size = max(MIN_GROUP_ROWS, -(-size // 8) * 8)
    return tuple((a, min(a + size, n)) for a in range(0, n, size))


def _head_rows(heads: Tensor, n: int, a: int, b: int, query_side: bool) -> Tensor:
    """The rows of ``heads`` (H, L, D) a group's table is made of: a query group the last b
    (distances b - 1 .. 0), a key group the first n - a (distances 0 .. n - 1 - a)."""
    return heads[:, n - b:] if query_side else heads[:, :n - a]


class _GroupTables(torch.autograd.Function):
    """x (B, H, L, D), heads (H, L, D) -> one table (B, H, rows, width) per row group, laid
    out head-major (H, B, rows, width): the group's rows of x against its head rows."""

    @staticmethod
    def forward(ctx, x: Tensor, heads: Tensor, groups, query_side: bool):
        bsz, nh, n, d = x.shape
        pieces, rows = [], []
        for a, b in groups:
            xr = x[:, :, a:b].transpose(0, 1).reshape(nh, bsz * (b - a), d)  # (H, B*rows, D)
            hr = _head_rows(heads, n, a, b, query_side)
            table = torch.bmm(xr, hr.transpose(1, 2))                 # (H, B * rows, W)
            pieces.append(table.view(nh, bsz, b - a, -1).transpose(0, 1))
            rows.append(xr)
        ctx.save_for_backward(heads, *rows)
        ctx.groups, ctx.query_side, ctx.x_shape = groups, query_side, x.shape
        return tuple(pieces)

    @staticmethod
    def backward(ctx, *grads: Tensor):
        heads, *rows = ctx.saved_tensors
        bsz, nh, n, d = ctx.x_shape
        # (B, H, L, D) like the attention's own gradient of q and k, which this one joins
        grad_x = heads.new_empty(bsz, nh, n, d) if ctx.needs_input_grad[0] else None
        grad_heads = torch.zeros_like(heads) if ctx.needs_input_grad[1] else None
        for (a, b), xr, g in zip(ctx.groups, rows, grads):
            hr = _head_rows(heads, n, a, b, ctx.query_side)
            g = g.transpose(0, 1).reshape(nh, bsz * (b - a), -1)      # (H, B * rows, W)
            if grad_x is not None:
                grad_x[:, :, a:b] = torch.bmm(g, hr).view(nh, bsz, b - a, d).transpose(0, 1)
            if grad_heads is not None:
                _head_rows(grad_heads, n, a, b, ctx.query_side).add_(
                    torch.bmm(g.transpose(1, 2), xr))                 # (H, W, D)
        return grad_x, grad_heads, None, None


@functools.lru_cache(maxsize=64)
def _table_rows(groups: tuple[tuple[int, int], ...], query_side: bool
                ) -> tuple[Tensor, Tensor]:
    """The row spec (3, L) of a query-side or key-side group table set (kernels/pairs.py: group,
    row in the group, shift of element "0") and the zero counts (L,) of its gradient rows."""
    group, local, shift, zero = [], [], [], []
    for g, (a, b) in enumerate(groups):
        r = torch.arange(a, b)
        group.append(torch.full((b - a,), g))
        local.append(r - a)
        # query row i, width b: C(i, j) at column b - 1 - i + j, zeros before column b - 1 - i
        # key row j, width n - a: P(j, i) at column i - j, zeros after column n - 1 - j
        shift.append(b - 1 - r if query_side else -r)
        zero.append(b - 1 - r if query_side else r - a)
    return torch.stack([torch.cat(t) for t in (group, local, shift)]), torch.cat(zero)


@functools.lru_cache(maxsize=64)
def _block_rows(blocks: tuple[tuple[int, int], ...]) -> Tensor:
    """The row spec (3, L) of rows held by blocks [(first row, rows)] covering 0..L-1."""
    return torch.cat([torch.stack((torch.full((rows,), g), torch.arange(rows),
                                   torch.zeros(rows, dtype=torch.int64)))
                      for g, (_, rows) in enumerate(blocks)], dim=1)


class CausalPairBias:
    """bias[b, h, i, j] = C(i, j) + P(j, i) over a causal square block, held as row-group
    tables (module docstring). ``inputs`` are the tables, the tensors gradients flow to;
    ``shape`` (B, H, L, L); ``write`` masks the pairs j > i."""

    def __init__(self, query_tables: tuple[Tensor, ...], key_tables: tuple[Tensor, ...],
                 groups: tuple[tuple[int, int], ...]) -> None:
        bsz, nh = query_tables[0].shape[:2]
        n = groups[-1][1]
        self.groups, self.shape = groups, (bsz, nh, n, n)
        self.inputs = (*query_tables, *key_tables)
        self.query = (table_groups(query_tables), _table_rows(groups, True)[0])
        self.key = (table_groups(key_tables), _table_rows(groups, False)[0])

    def write(self, out: Tensor, first_row: int, fill: float = float("-inf")) -> None:
        """out (B, H, rows, keys), row-contiguous <- the bias at rows first_row.. and keys
        0..keys-1, ``fill`` at hidden pairs."""
        write_pairs(self.query, self.key, out, first_row, fill)

    def grads(self, blocks: list[tuple[int, Tensor]]) -> tuple[Tensor, ...]:
        """The tables' gradients from the bias gradient, given as row blocks [(first row,
        (B, H, rows, keys))] that cover rows 0..L-1 in order, each row's visible keys
        included; hidden pairs are not read."""
        end = 0
        for first, g in blocks:
            if first != end or g.stride(-1) != 1:
                raise UserError("gradient blocks must be row-contiguous and cover the rows "
                                 "in order")
            end += g.shape[2]
        n_groups = len(self.groups)
        grads = tuple(torch.empty_like(t) for t in self.inputs)
        query_rows, query_zero = _table_rows(self.groups, True)
        key_rows, key_zero = _table_rows(self.groups, False)
        rows = _block_rows(tuple((first, g.shape[2]) for first, g in blocks))
        split_pairs((table_groups([g for _, g in blocks]), rows),
                    (table_groups(grads[:n_groups]), query_rows), query_zero,
                    (table_groups(grads[n_groups:]), key_rows), key_zero, *self.shape[:2])
        return grads

    def materialize(self) -> Tensor:
        """The bias as a (B, H, L, L) tensor, 0 at hidden pairs; differentiable."""
        return _Materialized.apply(self, *self.inputs)


class _Materialized(torch.autograd.Function):
    @staticmethod
    def forward(ctx, bias: CausalPairBias, *tables: Tensor) -> Tensor:
        out = tables[0].new_empty(bias.shape)
        bias.write(out, 0, fill=0.0)
        ctx.bias = bias
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        if grad.stride(-1) != 1:
            grad = grad.contiguous()
        return None, *ctx.bias.grads([(0, grad)])


def causal_pair_bias(q: Tensor, k: Tensor, query_heads: Tensor, key_heads: Tensor
                     ) -> CausalPairBias | None:
    """The causal square block's q_i . query_heads[L - 1 - (i - j)] + k_j . key_heads[i - j]:
    q, k (B, H, L, D), query_heads, key_heads (H, L, D) (query_heads in decreasing distance,
    key_heads in increasing distance order, as the "causal" PairLayout orders table
    columns). None where the native kernels cannot run on these tensors."""
    if not pair_kernel_ready(q, k, query_heads, key_heads) or q.shape != k.shape:
        return None
    groups = row_groups(q.shape[2])
    return CausalPairBias(_GroupTables.apply(q, query_heads, groups, True),
                          _GroupTables.apply(k, key_heads, groups, False), groups)
