"""The fused biased attention equals plain softmax attention, values and every gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.attention.biased import BiasedSpec, biased_attention
from posenc.attention.masks import causal_visible

pytestmark = pytest.mark.usefixtures("single_thread")


def _hidden(lq: int, lk: int):
    """The pairs a causal mask hides when the queries are the last lq of lk keys."""
    return ~causal_visible(lq, lk, "cpu")


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
    _check_against_plain(5, 9, bias_shape, causal)


@pytest.mark.parametrize("lq,lk,split", [
    (70, 70, True),            # causal square: half the keys
    (70, 100, True),           # queries at the end: 65 of 100
    (70, 180, False),          # 145 of 180: not worth a split
], ids=("square", "offset", "no-split"))
def test_row_blocks_match_plain_attention(lq, lk, split):
    """Long causal blocks run as row blocks, each over the keys its rows see only:
    the same values and gradients, and no bias gradient at hidden pairs."""
    from posenc.attention.biased import _row_blocks
    assert (len(_row_blocks(True, lq, lk, False)) > 1) == split
    for bias_shape in ((2, 3, lq, lk), (1, 3, lq, lk)):
        _check_against_plain(lq, lk, bias_shape, True)


def _check_against_plain(lq, lk, bias_shape, causal):
    hidden = _hidden(lq, lk) if causal else None
    grad_out = torch.randn(2, 3, lq, 6, generator=torch.Generator().manual_seed(9))
    results = []
    for fn in (_reference,
               lambda *a: biased_attention(*a[:4], BiasedSpec(causal=causal, scale=a[5]))):
        leaves = _leaves((2, 3, lq, 4), lk, 6, bias_shape)
        out = fn(*leaves, hidden, 0.37)
        out.backward(grad_out)
        results.append([out.detach()] + [t.grad for t in leaves])
    for got, want, what in zip(results[1], results[0], ("out", "q", "k", "v", "bias")):
        assert_close(got, want, atol=1e-5, rtol=1e-5, msg=lambda m, what=what: f"{what}: {m}")
    if causal:                                        # hidden pairs get no bias gradient
        assert results[1][4].expand(2, 3, lq, lk)[..., hidden].abs().max() == 0


@pytest.mark.parametrize("length", [6, 80])
def test_hidden_bias_entries_are_never_read(length):
    """Masked pairs may hold any finite value: the result does not change (one block, and
    row blocks)."""
    hidden = _hidden(length, length)
    q, k, v, bias = (t.detach() for t in _leaves((1, 2, length, 4), length, 4,
                                                 (1, 2, length, length)))
    for junk in (1e30, -1e30):
        assert_close(biased_attention(q, k, v, bias.masked_fill(hidden, junk),
                                      BiasedSpec(causal=True, scale=0.5)),
                     biased_attention(q, k, v, bias, BiasedSpec(causal=True, scale=0.5)))


def test_matches_sdpa_with_a_float_mask():
    q, k, v, bias = _leaves((2, 2, 7, 8), 7, 8, (1, 2, 7, 7), seed=3)
    want = F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias.masked_fill(_hidden(7, 7), float("-inf")), scale=0.3)
    got = biased_attention(q, k, v, bias, BiasedSpec(causal=True, scale=0.3))
    assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_weights_returned_for_a_value_term_carry_their_gradient():
    """out + f(weights): gradients through both outputs equal plain attention's."""
    hidden = _hidden(7, 7)
    table = torch.randn(7, 7, 5, generator=torch.Generator().manual_seed(4))
    grad_out = torch.randn(2, 3, 7, 5, generator=torch.Generator().manual_seed(5))

    def value_term(w):                                   # any differentiable use of weights
        return torch.einsum("bhij,ijd->bhid", w, table)

    results = []
    for fused in (False, True):
        leaves = _leaves((2, 3, 7, 4), 7, 5, (1, 3, 7, 7), seed=6)
        if fused:
            out, w = biased_attention(*leaves,
                                      BiasedSpec(causal=True, scale=0.4, with_weights=True))
        else:
            logits = (leaves[0] @ leaves[1].transpose(-2, -1)) * 0.4 + leaves[3]
            w = logits.masked_fill(hidden, float("-inf")).softmax(-1)
            out = w @ leaves[2]
        (out + value_term(w)).backward(grad_out)
        results.append([t.grad for t in leaves])
    for got, want in zip(results[1], results[0]):
        assert_close(got, want, atol=1e-5, rtol=1e-5)
