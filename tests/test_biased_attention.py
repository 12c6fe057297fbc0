"""The fused biased attention equals plain softmax attention, values and every gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.attention.backends import visible
from posenc.attention.biased import biased_attention, fits_biased_attention

pytestmark = pytest.mark.usefixtures("single_thread")


def _reference(q, k, v, bias, hidden, scale):
    logits = (q @ k.transpose(-2, -1)) * scale + bias
    if hidden is not None:
        logits = logits.masked_fill(hidden, float("-inf"))
    return logits.softmax(dim=-1) @ v


def _leaves(shape_q, shape_k, dv, bias_shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    b, h, lq, d = shape_q
    lk = shape_k
    q = torch.randn(b, h, lq, d, generator=gen)
    k = torch.randn(b, h, lk, d, generator=gen)
    v = torch.randn(b, h, lk, dv, generator=gen)
    bias = torch.randn(bias_shape, generator=gen) * 2
    return [t.requires_grad_() for t in (q, k, v, bias)]


@pytest.mark.parametrize("bias_shape", [(2, 3, 5, 9), (1, 3, 5, 9), (3, 5, 9)])
@pytest.mark.parametrize("causal", [True, False])
def test_values_and_gradients_match_plain_attention(bias_shape, causal):
    q_pos, k_pos = torch.arange(4, 9), torch.arange(9)             # queries at the end
    hidden = ~visible(q_pos, k_pos) if causal else None
    grad_out = torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(9))
    results = []
    for fn in (_reference, lambda *a: biased_attention(*a[:4], hidden=a[4], scale=a[5])):
        leaves = _leaves((2, 3, 5, 4), 9, 6, bias_shape)
        out = fn(*leaves, hidden, 0.37)
        out.backward(grad_out)
        results.append([out.detach()] + [t.grad for t in leaves])
    for got, want, what in zip(results[1], results[0], ("out", "q", "k", "v", "bias")):
        assert_close(got, want, atol=1e-5, rtol=1e-5, msg=lambda m, what=what: f"{what}: {m}")
    if causal:                                        # hidden pairs get no bias gradient
        assert results[1][4].expand(2, 3, 5, 9)[..., hidden].abs().max() == 0


def test_hidden_bias_entries_are_never_read():
    """Masked pairs may hold anything finite or infinite: the result does not change."""
    pos = torch.arange(6)
    hidden = ~visible(pos, pos)
    q, k, v, bias = (t.detach() for t in _leaves((1, 2, 6, 4), 6, 4, (1, 2, 6, 6)))
    junk = bias.masked_fill(hidden, 1e30)
    assert_close(biased_attention(q, k, v, junk, hidden=hidden, scale=0.5),
                 biased_attention(q, k, v, bias, hidden=hidden, scale=0.5))


def test_matches_sdpa_with_a_float_mask():
    q, k, v, bias = _leaves((2, 2, 7, 8), 7, 8, (1, 2, 7, 7), seed=3)
    pos = torch.arange(7)
    want = F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias.masked_fill(~visible(pos, pos), float("-inf")), scale=0.3)
    got = biased_attention(q, k, v, bias, hidden=~visible(pos, pos), scale=0.3)
    assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_serves_fp32_without_dropout_only():
    x = torch.zeros(1, 1, 2, 2)
    assert fits_biased_attention(x, x, x, 0.0)
    assert not fits_biased_attention(x, x, x, 0.1)
    assert not fits_biased_attention(x.bfloat16(), x.bfloat16(), x.bfloat16(), 0.0)


def test_weights_returned_for_a_value_term_carry_their_gradient():
    """out + f(weights): gradients through both outputs equal plain attention's."""
    pos = torch.arange(7)
    hidden = ~visible(pos, pos)
    table = torch.randn(7, 7, 5, generator=torch.Generator().manual_seed(4))
    grad_out = torch.randn(2, 3, 7, 5, generator=torch.Generator().manual_seed(5))

    def value_term(w):                                   # any differentiable use of weights
        return torch.einsum("bhij,ijd->bhid", w, table)

    results = []
    for fused in (False, True):
        leaves = _leaves((2, 3, 7, 4), 7, 5, (1, 3, 7, 7), seed=6)
        if fused:
            out, w = biased_attention(*leaves, hidden=hidden, scale=0.4, with_weights=True)
        else:
            logits = (leaves[0] @ leaves[1].transpose(-2, -1)) * 0.4 + leaves[3]
            w = logits.masked_fill(hidden, float("-inf")).softmax(-1)
            out = w @ leaves[2]
        (out + value_term(w)).backward(grad_out)
        results.append([t.grad for t in leaves])
    for got, want in zip(results[1], results[0]):
        assert_close(got, want, atol=1e-5, rtol=1e-5)
