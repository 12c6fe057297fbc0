"""``conv``: position only through zero padding, causal decoding in steps, options."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding

H, D = 2, 4
C = H * D


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=32, **options)


def test_conv_leaks_position_through_zero_padding():
    """A constant input is marked only where the kernel overlaps the zero padding."""
    x = torch.randn(C).expand(1, 10, C)
    causal = _pe("conv", kernel_size=3)
    out = causal.embed(x, torch.arange(10))[0]
    assert_close(out[2:], out[2].expand(8, C))               # interior: translation-equal
    assert (out[0] - out[2]).abs().max() > 1e-3 and (out[1] - out[2]).abs().max() > 1e-3
    centered = _pe("conv", kernel_size=5, padding="centered")
    out = centered.embed(x, torch.arange(10))[0]
    assert_close(out[2:8], out[2].expand(6, C))
    for edge in (0, 1, 8, 9):
        assert (out[edge] - out[4]).abs().max() > 1e-3


def test_conv_causal_ignores_the_future_and_decodes_in_steps():
    pe = _pe("conv", kernel_size=4, bias=True)
    with torch.no_grad():
        pe.bias.normal_()
    x = torch.randn(2, 9, C)
    full = pe.embed(x, torch.arange(9))
    changed = x.clone()
    changed[:, 6:] += 1.0
    assert_close(pe.embed(changed, torch.arange(9))[:, :6], full[:, :6])
    state: dict = {}
    steps = [pe.embed(x[:, :2], torch.arange(2), state=state)]
    steps += [pe.embed(x[:, t:t + 1], torch.tensor([t]), state=state) for t in range(2, 9)]
    assert_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("options,match", [
    ({"kernel_size": 1}, "kernel_size"), ({"kernel_size": 4, "padding": "centered"}, "odd"),
    ({"padding": "same"}, "padding"), ({"bias": 1}, "bias")])
def test_conv_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("conv", **options)


def test_conv_centered_refuses_a_cache():
    pe = _pe("conv", padding="centered")
    with pytest.raises(ValueError, match="causal"):
        pe.embed(torch.randn(1, 3, C), torch.arange(3), state={})
