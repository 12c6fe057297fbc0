"""FIRE: the formula written out from the paper, progressive interpolation, options."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.encodings.context import HookContext
from tests.encodings.helpers import build as _pe
from tests.encodings.helpers import randomize as _randomize


def _fire_reference(pe, q_pos, k_pos):
    """FIRE written out from the paper: f(psi(i - j) / psi(max(L, i))) -> (H, Lq, Lk)."""
    c = pe.c
    psi = lambda x: torch.log(torch.abs(c * x) + 1)
    i, j = q_pos.float()[:, None], k_pos.float()[None, :]
    threshold = (pe.L_multiplier * pe.init_L).abs()
    x = psi(i - j) / (psi(torch.maximum(i, threshold)) + pe.eps)
    hidden = torch.relu(x[..., None] * pe.w1 + pe.b1)                   # (Lq, Lk, W)
    return torch.einsum("qkw,hw->hqk", hidden, pe.w2) + pe.b2[:, None, None]


def test_fire_formula_and_interpolation():
    pe = _randomize(_pe("fire", init_L=6.0))
    with torch.no_grad():
        pe.c.fill_(0.3)
        pe.L_multiplier.fill_(1.0)
    q_pos, k_pos = torch.arange(20), torch.arange(20)
    assert_close(pe.score_bias(None, None, HookContext.for_positions(q_pos, k_pos))[0],
                 _fire_reference(pe, q_pos, k_pos))
    x = pe.normalised_distance(q_pos, k_pos)
    visible = k_pos[None, :] <= q_pos[:, None]
    assert x[visible].min() >= 0 and x[visible].max() <= 1
    # past the threshold every query maps its farthest key (j = 0) to ~1: progressive
    # interpolation keeps the input range fixed whatever the length
    assert_close(x[6:, 0], torch.ones(14), atol=1e-5, rtol=0)
    # below the threshold the bias depends on i - j only
    bias = pe.score_bias(None, None, HookContext.for_positions(q_pos, k_pos))[0]
    assert_close(bias[:, 3, 1], bias[:, 5, 3])
    assert (bias[:, 12, 10] - bias[:, 3, 1]).abs().max() > 1e-4       # above it, on i too


@pytest.mark.parametrize("options,match", [
    ({"mlp_width": 0}, "mlp_width"), ({"init_c": 0.0}, "init_c"),
    ({"init_L": -1.0}, "init_L"), ({"eps": 0.0}, r"eps must be a number in \(0.0, inf\)")])
def test_fire_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("fire", **options)


def _per_pair(pe, q_pos, k_pos):
    """The bias evaluated pair by pair: (B, H, Lq, Lk)."""
    bias = pe.mlp(pe.normalised_distance(q_pos, k_pos))
    return (bias if bias.dim() == 4 else bias[None]).permute(0, 3, 1, 2)


@pytest.mark.parametrize("q_pos,k_pos", [
    # left-padded rows (padding at position 0), packed rows (positions restart)
    (torch.tensor([[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5], [0, 0, 1, 2, 3, 4]]), None),
    (torch.tensor([[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 0, 1]]), None),
    # a chunk of queries per row against shared or per-row keys
    (torch.tensor([[5, 6, 7, 8, 9], [3, 4, 5, 6, 7]]), torch.arange(10)),
    (torch.tensor([[3, 4, 5], [1, 2, 3]]) + 20, torch.tensor([[20, 21, 22, 23, 24, 25]] * 2)),
])
def test_fire_bias_per_sequence_from_its_table_equals_per_pair(q_pos, k_pos):
    """Positions per sequence on the CPU read the bias from a table over the positions'
    ranges (the MLP runs once per distinct pair): values and gradients equal per pair."""
    k_pos = q_pos if k_pos is None else k_pos
    pe = _randomize(_pe("fire", init_L=3.0))
    assert pe._table_ranges(q_pos, k_pos) is not None            # the table path is taken
    got = pe.score_bias(None, None, HookContext.for_positions(q_pos, k_pos))
    want = _per_pair(pe, q_pos, k_pos)
    assert_close(got, want, rtol=0, atol=0)
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(0))
    grads = torch.autograd.grad((got * weights).sum(), list(pe.parameters()))
    wants = torch.autograd.grad((want * weights).sum(), list(pe.parameters()))
    for g, w in zip(grads, wants):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_fire_table_only_where_it_is_smaller_and_readable(monkeypatch):
    pe = _pe("fire")
    padded = torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3]])
    assert pe._table_ranges(torch.arange(4), torch.arange(4)) is None        # shared: per pair
    assert pe._table_ranges(torch.tensor([[0, 100]]), torch.tensor([[0, 100]])) is None
    assert pe._table_ranges(torch.tensor([[9], [7]]), torch.arange(10)) is None  # decoding
    assert pe._table_ranges(padded.to("meta"), padded.to("meta")) is None    # no host read
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert pe._table_ranges(padded, padded) is None                          # no graph break
