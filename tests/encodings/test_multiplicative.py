"""``multiplicative``: the input times a learned (or sinusoidal) position vector; its
options."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.encodings.sinusoidal import sinusoidal_at

H, D = 2, 4
C = H * D


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=32, **options)


def test_multiplicative_formulas():
    x, pos = torch.randn(2, 5, C), torch.arange(5) + 2
    pe = _pe("multiplicative")
    assert_close(pe.embed(x, pos), x * pe.table[pos])
    assert_close(pe.table.mean(), torch.tensor(1.0), atol=0.05, rtol=0)     # starts near 1
    sin = _pe("multiplicative", positions="sinusoidal", base=100.0)
    assert_close(sin.embed(x, pos), x * sinusoidal_at(pos, C, 100.0))
    with pytest.raises(ValueError, match=r"\[0, 32\)"):
        pe.embed(x, torch.arange(5) + 30)


@pytest.mark.parametrize("options,match", [
    ({"positions": "rotary"}, "positions"), ({"init_std": -0.1}, "init_std"),
    ({"base": 0.5}, "base")])
def test_multiplicative_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("multiplicative", **options)
