"""FIRE: the formula written out from the paper, progressive interpolation, options."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding

H, D = 2, 8


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=64, **options)


def _randomize(pe, seed=2):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return pe


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
    assert_close(pe.score_bias(None, None, q_pos, k_pos)[0], _fire_reference(pe, q_pos, k_pos))
    x = pe.normalised_distance(q_pos, k_pos)
    visible = k_pos[None, :] <= q_pos[:, None]
    assert x[visible].min() >= 0 and x[visible].max() <= 1
    # past the threshold every query maps its farthest key (j = 0) to ~1: progressive
    # interpolation keeps the input range fixed whatever the length
    assert_close(x[6:, 0], torch.ones(14), atol=1e-5, rtol=0)
    # below the threshold the bias depends on i - j only
    bias = pe.score_bias(None, None, q_pos, k_pos)[0]
    assert_close(bias[:, 3, 1], bias[:, 5, 3])
    assert (bias[:, 12, 10] - bias[:, 3, 1]).abs().max() > 1e-4       # above it, on i too


@pytest.mark.parametrize("options,match", [
    ({"mlp_width": 0}, "mlp_width"), ({"init_c": 0.0}, "init_c"),
    ({"init_L": -1.0}, "init_L"), ({"eps": 0.0}, r"eps must be a number in \(0.0, inf\)")])
def test_fire_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("fire", **options)
