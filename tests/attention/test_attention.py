"""Multi-head attention checks its input before anything runs."""

from __future__ import annotations

import pytest
import torch

from posenc import build_encoding
from posenc.attention import MultiHeadAttention

from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")


def test_attention_layer_checks_its_input():
    attn, pe = MultiHeadAttention(16, 2), build_encoding("rope", n_heads=2, head_dim=8)
    x = torch.randn(1, 5, 16)
    _raises(r"pos must have shape \(5,\)", attn, x, torch.arange(6), pe, causal=True)
    _raises(r"x must be \(batch, length, d_model=16\), got shape \(1, 5, 12\)", attn,
            torch.randn(1, 5, 12), torch.arange(5), pe, causal=True)
