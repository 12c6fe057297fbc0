"""Absolute encodings: nope, learned table, Vaswani sinusoids."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.encodings.sinusoidal import sinusoidal_table

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("dim", [8, 7, 64])
def test_sinusoidal_table_is_the_vaswani_formula(dim):
    table = sinusoidal_table(50, dim)
    assert table.shape == (50, dim) and table.dtype == torch.float32
    want = torch.empty(50, dim, dtype=torch.float64)
    for p in range(50):
        for j in range(dim):
            angle = p / 10000 ** (2 * (j // 2) / dim)
            want[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    assert_close(table.double(), want, atol=1e-5, rtol=0)


def test_sinusoidal_dot_product_depends_only_on_offset():
    table = sinusoidal_table(64, 32).double()
    gram = table @ table.T                                     # (64, 64): p_i . p_j
    for d in range(-63, 64):
        diag = torch.diagonal(gram, offset=d)
        assert_close(diag, diag[:1].expand_as(diag), atol=1e-4, rtol=0)
    assert (gram[0, 0] - gram[0, 5]).abs() > 1e-2               # and it varies with the offset


def test_sinusoidal_embed_adds_the_table_at_any_position():
    pe = build_encoding("sinusoidal", n_heads=2, head_dim=8, scale=0.5)
    x = torch.randn(2, 5, 16)
    pos = torch.tensor([0, 1, 2, 10_000, 1_000_000])
    out = pe.embed(x, pos)
    assert_close(out[:, :3], x[:, :3] + 0.5 * sinusoidal_table(3, 16))
    far = torch.tensor([math.sin(10_000.0), math.cos(10_000.0)])   # dims 0, 1 at p = 10000
    assert_close(out[:, 3, :2] - x[:, 3, :2], 0.5 * far.expand(2, 2), atol=1e-3, rtol=0)
    assert torch.isfinite(out).all()
    assert list(pe.parameters()) == []


def test_learned_adds_its_trainable_table():
    pe = build_encoding("learned", n_heads=2, head_dim=4, max_len=10)
    assert pe.table.shape == (10, 8) and pe.table.requires_grad
    x = torch.randn(3, 4, 8)
    pos = torch.tensor([9, 0, 4, 4])
    out = pe.embed(x, pos)
    assert_close(out, x + pe.table[pos])
    out.sum().backward()
    grad = torch.zeros(10, 8)
    grad[9], grad[0], grad[4] = 3.0, 3.0, 6.0                   # batch 3, position 4 twice
    assert_close(pe.table.grad, grad)


def test_learned_table_edge_is_usable_and_past_it_raises():
    pe = build_encoding("learned", n_heads=1, head_dim=4, max_len=6)
    pe.embed(torch.zeros(1, 6, 4), torch.arange(6))             # positions 0..5: fine
    with pytest.raises(ValueError, match=r"max_len"):
        pe.embed(torch.zeros(1, 1, 4), torch.tensor([6]))
    with pytest.raises(ValueError, match=r"\[0, 6\)"):
        pe.embed(torch.zeros(1, 1, 4), torch.tensor([-1]))


def test_nope_changes_nothing():
    pe = build_encoding("nope", n_heads=2, head_dim=4)
    x = torch.randn(1, 3, 8)
    assert pe.embed(x, torch.arange(3)) is x
    q, k = torch.randn(2, 1, 2, 3, 4).unbind(0)
    assert pe.transform_qk(q, k, torch.arange(3), torch.arange(3)) == (q, k)
    assert pe.score_bias(q, k, torch.arange(3), torch.arange(3)) is None
    assert pe.hook_kinds() == [] and pe.backends() == ("sdpa", "flex", "eager")


@torch.no_grad()
def test_nope_model_still_sees_order_through_the_causal_mask(tiny_lm):
    model = tiny_lm("nope", n_layers=1)         # one layer: later rows see a set of tokens
    ids = torch.randint(0, 48, (1, 8))
    swapped = ids[:, [1, 0, 2, 3, 4, 5, 6, 7]]
    a, b = model(ids), model(swapped)
    assert_close(a[:, 2:], b[:, 2:], atol=1e-5, rtol=1e-5)      # same set of earlier tokens
    assert (a[:, 0] - b[:, 0]).abs().max() > 1e-3
