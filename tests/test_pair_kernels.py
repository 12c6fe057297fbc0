"""The native causal pair sum against the relative-shift views it replaces."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.encodings import build_encoding
from posenc.encodings.pair_kernels import causal_pair_sum, native_pair_status
from posenc.encodings.relative_shift import head_table, pair_layout

pytestmark = pytest.mark.usefixtures("single_thread")
needs_kernel = pytest.mark.skipif(native_pair_status() != "ready",
                                  reason=f"pair kernel: {native_pair_status()}")


def _tables(batch: int, heads: int, length: int, seed: int):
    """Head-major tables from head_table, with the leaves they depend on."""
    gen = torch.Generator().manual_seed(seed)
    xq = torch.randn(batch, length, heads, 5, generator=gen).transpose(1, 2).requires_grad_()
    xk = torch.randn(batch, length, heads, 5, generator=gen).transpose(1, 2).requires_grad_()
    hq = torch.randn(heads, length, 5, generator=gen, requires_grad=True)
    hk = torch.randn(heads, length, 5, generator=gen, requires_grad=True)
    return (xq, xk, hq, hk), head_table(xq, hq), head_table(xk, hk)


@needs_kernel
@pytest.mark.parametrize("length", [2, 7, 8, 9, 40, 72])
@pytest.mark.parametrize("batch,heads", [(3, 2), (1, 4)])
def test_kernel_equals_the_two_views(length, batch, heads):
    """Values at visible pairs, zeros at hidden ones, and gradients into both tables and
    everything behind them: exactly those of query_rows + key_rows (lengths that are and are
    not multiples of the kernel's 8 x 8 blocks and 32 x 32 tiles)."""
    layout = pair_layout(torch.arange(length), torch.arange(length), True)
    leaves, query_table, key_table = _tables(batch, heads, length, seed=length)
    got = causal_pair_sum(query_table, key_table)
    want = layout.query_rows(query_table) + layout.key_rows(key_table)
    seen = torch.ones(length, length, dtype=torch.bool).tril()
    assert torch.equal(got[..., seen], want[..., seen])
    assert not got[..., ~seen].any()
    grad = torch.randn(batch, heads, length, length) * seen
    inputs = (*leaves, query_table, key_table)
    got_grads = torch.autograd.grad(got, inputs, grad, retain_graph=True)
    want_grads = torch.autograd.grad(want, inputs, grad)
    for g, w in zip(got_grads, want_grads):
        assert torch.equal(g, w)
    for g in got_grads[-2:]:                      # laid out like the head-major tables
        assert g.transpose(0, 1).is_contiguous()


@needs_kernel
def test_kernel_reads_contiguous_and_offset_tables():
    """Any leading strides: contiguous tables, and views with a storage offset."""
    layout = pair_layout(torch.arange(12), torch.arange(12), True)
    gen = torch.Generator().manual_seed(1)
    big = torch.randn(3, 2, 12, 12, generator=gen)
    query_table, key_table = big[1:], torch.randn(2, 2, 12, 12, generator=gen)
    seen = torch.ones(12, 12, dtype=torch.bool).tril()
    want = layout.query_rows(query_table) + layout.key_rows(key_table)
    assert torch.equal(causal_pair_sum(query_table, key_table)[..., seen], want[..., seen])


def test_kernel_declines_what_it_cannot_take(monkeypatch):
    """float64, 3-d tables, mismatched shapes and POSENC_NATIVE_KERNELS=0 give None; the
    layout then adds the views."""
    table = torch.randn(2, 2, 6, 6)
    assert causal_pair_sum(table.double(), table.double()) is None
    assert causal_pair_sum(table[0], table[0]) is None
    assert causal_pair_sum(table, table[:1]) is None
    monkeypatch.setenv("POSENC_NATIVE_KERNELS", "0")
    assert causal_pair_sum(table, table) is None
    layout = pair_layout(torch.arange(6), torch.arange(6), True)
    assert_close(layout.pair_sum(table, table),
                 layout.query_rows(table) + layout.key_rows(table))


@needs_kernel
def test_deberta_trains_the_same_with_and_without_the_kernel(monkeypatch):
    """A causal DeBERTa bias (c2p + p2c) through the kernel gives the same bias and
    parameter gradients as the views."""
    pe = build_encoding("deberta", n_heads=2, head_dim=8, max_len=24, position_buckets=8,
                        max_relative_positions=16)
    pos = torch.arange(20)
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 20, 2, 8, generator=gen).transpose(1, 2)
    k = torch.randn(2, 20, 2, 8, generator=gen).transpose(1, 2)
    seen = torch.ones(20, 20, dtype=torch.bool).tril()
    grad = torch.randn(2, 2, 20, 20, generator=gen) * seen

    def run():
        bias = pe.score_bias(q, k, pos, pos, causal=True)
        return bias[..., seen], torch.autograd.grad(bias, list(pe.parameters()), grad)

    with_kernel = run()
    monkeypatch.setenv("POSENC_NATIVE_KERNELS", "0")
    without = run()
    assert_close(with_kernel[0], without[0])
    for g, w in zip(with_kernel[1], without[1]):
        assert_close(g, w)
