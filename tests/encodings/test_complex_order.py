"""``complex_order``: word embeddings turned by a position-dependent phase (the offset
property), in a model, and its errors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import LMConfig, TransformerLM, build_encoding

H, D = 2, 4
C = H * D
V = 48


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=32, **options)


def test_complex_order_offset_property():
    """Shifting a word by n positions multiplies its complex embedding by exp(i w n)."""
    pe = _pe("complex_order", vocab_size=V)
    with torch.no_grad():
        pe.frequency.normal_(0, 0.5)
    x, ids, pos = torch.randn(2, 6, C), torch.randint(0, V, (2, 6)), torch.arange(6)
    z = pe.complex_embedding(x, pos, ids)
    for n in (1, 7):
        shifted = pe.complex_embedding(x, pos + n, ids)
        turn = torch.polar(torch.ones(2, 6, C), pe.frequency[ids] * n)
        assert_close(shifted, z * turn)
    assert_close(z.abs(), x.abs())                            # the amplitude is position-free
    # the projection starts at [I, 0]: the real part alone
    angle = pe.frequency[ids] * pos[None, :, None] + pe.phase[ids]
    assert_close(pe.embed(x, pos, ids=ids), x * angle.cos())


def test_complex_order_in_a_model_and_errors():
    cfg = LMConfig(vocab_size=V, d_model=C, n_layers=1, n_heads=H, max_len=16, d_ff=16,
                   pe="complex_order", pe_options={"vocab_size": V})
    model = TransformerLM(cfg)
    assert model(torch.randint(0, V, (1, 5))).shape == (1, 5, V)
    with pytest.raises(ValueError, match="vocab_size"):
        _pe("complex_order")
    with pytest.raises(ValueError, match="vocab_size"):
        _pe("complex_order", vocab_size=0)
    with pytest.raises(ValueError, match="freq_base"):
        _pe("complex_order", vocab_size=V, freq_base=1.0)
    pe = _pe("complex_order", vocab_size=10)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        pe.embed(torch.randn(1, 3, C), torch.arange(3), ids=torch.tensor([[1, 2, 10]]))
    with pytest.raises(ValueError, match="token ids"):
        pe.embed(torch.randn(1, 3, C), torch.arange(3))
