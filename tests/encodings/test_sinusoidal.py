"""The Vaswani sinusoids: the table's formula, dot products that depend only on the
offset, and ``embed`` at any position."""

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
