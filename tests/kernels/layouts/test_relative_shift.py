"""Pair layouts of per-distance tables: each pair read at its distance (values and
gradients), views with a storage offset, head-major tables, and the relative shift's sliding
window."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.kernels.layouts import relative_shift
from posenc.kernels.layouts.relative_shift import layout_kind, pair_layout
from tests.encodings.helpers import K_POS, Q_POS

pytestmark = pytest.mark.usefixtures("single_thread")


def _term(distances: torch.Tensor) -> torch.Tensor:
    """A per-distance function with a different value at every distance: (3, 1, N)."""
    return torch.sin(distances.float()[None, None] * 0.37 + torch.arange(3.0)[:, None, None])


_SEVEN, _FROM_FIVE = torch.arange(7), torch.arange(5, 12)   # one tensor as queries and keys


@pytest.mark.parametrize("q_pos,k_pos,causal,consecutive,kind", [
    (_SEVEN, _SEVEN, True, True, "causal"),
    (_FROM_FIVE, _FROM_FIVE, True, True, "causal"),
    (_SEVEN, _SEVEN, False, True, "window"),
    (torch.arange(7), torch.arange(7), True, True, "window"),     # equal, not the same
    (torch.arange(3, 7), torch.arange(7), True, True, "window"),
    (torch.arange(2, 6), torch.arange(5, 9), False, True, "window"),
    (torch.arange(3, 7), torch.arange(7), True, False, "gather"),  # no promise: gather
    (torch.tensor([4, 6]), torch.tensor([0, 1, 3, 4, 6]), True, False, "gather"),
    (torch.tensor([1, 4, 6]), torch.tensor([0, 2, 3, 6, 7]), False, False, "gather"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_layouts_read_each_pair_at_its_distance(q_pos, k_pos, causal, consecutive, kind):
    """query_rows / key_rows of distance tables equal the term at q_pos_i - k_pos_j, values
    and gradients, at every pair the attention can see (causal: the queries are the last
    keys). The kind follows from what the caller promises, never from the values."""
    assert layout_kind(q_pos, k_pos, causal, consecutive) == kind
    layout = pair_layout(q_pos, k_pos, causal, consecutive)
    assert layout.kind == kind
    lq, lk = len(q_pos), len(k_pos)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(2, 3, lq, 1, generator=gen, requires_grad=True)    # per-query weight
    b = torch.randn(2, 3, lk, 1, generator=gen, requires_grad=True)    # per-key weight
    got = (layout.query_rows(a * _term(layout.query_distances))
           + layout.key_rows(b * _term(layout.key_distances)))
    dist = q_pos[:, None] - k_pos[None, :]
    exact = _term(dist.flatten()).view(3, lq, lk)
    want = a * exact + b.transpose(-2, -1) * exact
    seen = dist >= 0 if causal else torch.ones_like(dist, dtype=torch.bool)
    assert_close(got[..., seen], want[..., seen])
    grad = torch.randn(2, 3, lq, lk, generator=gen) * seen               # hidden: no gradient
    for g, w in zip(torch.autograd.grad(got, (a, b), grad), torch.autograd.grad(want, (a, b),
                                                                             grad)):
        assert_close(g, w, atol=1e-6, rtol=1e-5)


def test_causal_layout_reads_views_with_a_storage_offset():
    """Tables and gradients that are views into larger buffers are read where they live."""
    pos = torch.arange(6)
    layout = pair_layout(pos, pos, True, consecutive=True)
    assert layout.kind == "causal"
    gen = torch.Generator().manual_seed(5)
    big = torch.randn(3, 2, 6, 6, generator=gen, requires_grad=True)
    table = big[1:]                                                  # storage offset 72
    for read in (layout.query_rows, layout.key_rows):
        want_table = table.detach().clone().requires_grad_()
        seen = pos[None, :] <= pos[:, None]
        grad_buffer = torch.randn(3, 2, 6, 6, generator=gen) * seen
        grad = grad_buffer[1:]                                       # a view, offset too
        got = torch.autograd.grad(read(table), big, grad)[0][1:]
        want = torch.autograd.grad(read(want_table), want_table, grad.contiguous())[0]
        assert_close(read(table)[..., seen], read(want_table)[..., seen])
        assert_close(got, want)
    # the backward functions themselves, handed an offset view directly
    from types import SimpleNamespace

    from posenc.kernels.layouts.relative_shift import _CausalKeyRows, _CausalQueryRows
    buffer = torch.randn(3, 2, 6, 6, generator=gen) * seen
    for fn in (_CausalQueryRows, _CausalKeyRows):
        ctx = SimpleNamespace(meta=torch.empty(2, 2, 6, 6, device="meta"))
        assert_close(fn.backward(ctx, buffer[1:]), fn.backward(ctx, buffer[1:].clone()))


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("causal", [True, False])
def test_head_major_tables_read_like_contiguous_ones(batch, causal):
    """head_table equals the per-head product, and its head-major result read through every
    layout gives the values and gradients (into x and the heads) of a contiguous copy; the
    gradient reaching the table is laid out head-major too."""
    from posenc.kernels.layouts.relative_shift import head_table
    pos = torch.arange(6)
    layout = pair_layout(pos, pos, causal, consecutive=True)
    gen = torch.Generator().manual_seed(3)
    projection = torch.randn(batch, 6, 2 * 3 * 4, generator=gen)       # (B, L, 2 H D)
    x = projection[..., :12].view(batch, 6, 3, 4).transpose(1, 2).requires_grad_()
    heads = torch.randn(3, len(layout.query_distances), 4, generator=gen, requires_grad=True)
    seen = pos[None, :] <= pos[:, None] if causal else torch.ones(6, 6, dtype=torch.bool)
    grad = torch.randn(batch, 3, 6, 6, generator=gen) * seen
    table = head_table(x, heads)
    assert table.transpose(0, 1).is_contiguous()                       # (H, B, L, N)
    assert_close(table, x @ heads.transpose(-2, -1))
    for read in (layout.query_rows, layout.key_rows):
        got = read(head_table(x, heads))
        want = read((x @ heads.transpose(-2, -1)).contiguous())
        assert_close(got[..., seen], want[..., seen])
        assert_close(torch.autograd.grad(got, (x, heads), grad),
                     torch.autograd.grad(want, (x, heads), grad))
        table = head_table(x, heads)
        table.register_hook(lambda g: assert_close(g.transpose(0, 1).is_contiguous(), True))
        read(table).backward(grad)


def test_sliding_window_reads_the_relative_shift():
    table = torch.arange(2 * 4 * 9.0).view(2, 4, 9)
    got = relative_shift.sliding_window(table, 5, 3, -1)                # (2, 4, 5)
    rows = torch.arange(4)[:, None]
    torch.testing.assert_close(got, table[:, rows, 3 - rows + torch.arange(5)])
    with pytest.raises(ValueError, match="leaves the 9 columns"):
        relative_shift.sliding_window(table, 5, 2, -1)


def test_window_distances_read_no_position_on_the_host():
    """The window layout of consecutive positions works on the meta device (no values):
    its distances are a tensor offset by q_pos[0] - k_pos[-1]."""
    q_pos, k_pos = torch.arange(5, 9, device="meta"), torch.arange(9, device="meta")
    layout = pair_layout(q_pos, k_pos, True, consecutive=True)
    assert layout.kind == "window" and layout.key_distances.shape == (12,)
    assert pair_layout(K_POS, K_POS, True, consecutive=False).kind == "gather"
    assert layout_kind(Q_POS, K_POS, True, consecutive=False) == "gather"
