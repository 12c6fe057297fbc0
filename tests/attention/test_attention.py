"""Multi-head attention checks its input before anything runs."""

from __future__ import annotations

import pytest
import torch

from posenc import build_encoding
from posenc.attention import AttentionContext, MultiHeadAttention
from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")


def test_attention_layer_checks_its_input():
    attn, pe = MultiHeadAttention(16, 2), build_encoding("rope", n_heads=2, head_dim=8)
    x = torch.randn(1, 5, 16)
    _raises(r"x must be \(batch, length=6, d_model=16\), got shape \(1, 5, 16\)", attn, x,
            AttentionContext(torch.arange(6), causal=True), pe)
    _raises(r"x must be \(batch, length=5, d_model=16\), got shape \(1, 5, 12\)", attn,
            torch.randn(1, 5, 12), AttentionContext(torch.arange(5), causal=True), pe)
