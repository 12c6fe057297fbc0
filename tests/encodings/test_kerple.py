"""KERPLE: the formula of both variants, translation invariance, finite gradients at
distance zero, options."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.encodings.context import HookContext
from tests.encodings.helpers import build as _pe
from tests.encodings.helpers import randomize as _randomize


@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_formula_and_translation_invariance(variant):
    pe = _randomize(_pe("kerple", variant=variant))
    r1, r2 = F.softplus(pe.raw_r1), pe.r2
    q_pos, k_pos = torch.arange(4, 9), torch.arange(12)
    at = HookContext.for_positions(q_pos, k_pos)
    bias = pe.score_bias(None, None, at)[0]                                  # (H, Lq, Lk)
    dist = (q_pos[:, None] - k_pos[None, :]).abs().float()
    if variant == "log":
        want = -r1[:, None, None] * torch.log(1 + r2[:, None, None] * dist)
    else:
        assert ((r2 > 0) & (r2 < 2)).all()
        want = -r1[:, None, None] * dist ** r2[:, None, None]
    assert_close(bias, want)
    assert_close(pe.score_bias(None, None, HookContext.for_positions(q_pos + 37, k_pos + 37))[0],
                 bias)
    assert (bias <= 0).all() and (bias[:, :, 4:] - bias[:, :, 3:-1] != 0).any()


def test_kerple_power_gradient_is_finite_at_distance_zero():
    pe = _pe("kerple", variant="power")
    pe.distance_bias(torch.arange(-3, 4)).sum().backward()
    for p in pe.parameters():
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_kerple_options():
    with pytest.raises(ValueError, match="variant must be one of 'log', 'power'"):
        _pe("kerple", variant="gauss")
