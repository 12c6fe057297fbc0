"""The forget gate (Lin et al., 2025): x-transformers' ``DataDependentAlibi`` as the oracle
(copied weights), constant gates as ALiBi, the bidirectional form, the score_mod, and its
option and context errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import AttentionContext, MultiHeadAttention
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from tests.encodings.helpers import assert_backend_grads_agree
from tests.helpers import raises_one_line

pytestmark = pytest.mark.usefixtures("single_thread")

H, D = 4, 8
C = H * D


def _pe(**options):
    pe = build_encoding("forget_gate", n_heads=H, head_dim=D, **options)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():                       # gates well away from 1: a visible decay
        for p in pe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return pe


def _context(pe, x, causal=True):
    pos = torch.arange(x.shape[1])
    return HookContext.for_positions(pos, pos, causal=causal, key_terms=pe.token_terms(x))


def _x_transformers(pe, causal):
    """x-transformers' module with ``pe``'s weights (one Linear of H or 2H outputs)."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    ref = xt.DataDependentAlibi(C, H, causal=causal)
    projections = [pe.gate_proj] + ([] if causal else [pe.later_gate_proj])
    with torch.no_grad():
        ref.to_forget_gates[0].weight.copy_(torch.cat([p.weight for p in projections]))
        ref.to_forget_gates[0].bias.copy_(torch.cat([p.bias for p in projections]))
    return ref


@pytest.mark.parametrize("causal", [True, False])
def test_bias_equals_x_transformers_data_dependent_alibi(causal):
    pe = _pe(bidirectional=not causal)
    ref = _x_transformers(pe, causal)
    x = torch.randn(2, 11, C)
    q = torch.randn(2, H, 11, D)
    assert_close(pe.score_bias(q, q, _context(pe, x, causal)), ref(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "eager", "flex"])
@torch.no_grad()
def test_attention_output_equals_x_transformers(backend):
    """One causal attention layer: softmax(q.k / sqrt(D) + DataDependentAlibi(x)) v."""
    pe = _pe()
    ref_bias = _x_transformers(pe, True)
    attn = MultiHeadAttention(C, H)
    x = torch.randn(2, 13, C)
    out, _ = attn(x, AttentionContext(torch.arange(13), causal=True, backend=backend), pe)
    q, k, v = (attn.heads(z) for z in attn.qkv_proj(x).chunk(3, dim=-1))
    logits = q @ k.transpose(-1, -2) / math.sqrt(D) + ref_bias(x)
    logits = logits.masked_fill(torch.ones(13, 13, dtype=torch.bool).triu(1), float("-inf"))
    want = (logits.softmax(-1) @ v).transpose(1, 2).reshape(2, 13, C)
    assert_close(out, attn.out_proj(want), atol=1e-5, rtol=1e-5)


def test_constant_gates_are_alibi():
    """With w = 0 every gate is sigmoid(b): the bias is log(sigmoid(b_h)) * (i - j), ALiBi
    with slope -log(sigmoid(b_h)) per head."""
    pe = build_encoding("forget_gate", n_heads=H, head_dim=D)
    bias = torch.tensor([0.5, 1.0, 2.0, 5.0])
    with torch.no_grad():
        pe.gate_proj.weight.zero_()
        pe.gate_proj.bias.copy_(bias)
    x = torch.randn(1, 9, C)
    got = pe.score_bias(None, None, _context(pe, x))
    pos = torch.arange(9)
    slopes = -torch.nn.functional.logsigmoid(bias)
    want = -slopes[:, None, None] * (pos[:, None] - pos[None, :])
    assert_close(got[0], want.float(), atol=1e-5, rtol=1e-5)


def test_initial_gates_forget_little():
    """bias_init = 5: f = sigmoid(5) = 0.9933 before training, as x-transformers."""
    pe = build_encoding("forget_gate", n_heads=H, head_dim=D)
    assert_close(pe.gate_proj.bias, torch.full((H,), 5.0))
    assert pe.position_free and pe.translation_invariant and pe.per_layer


@pytest.mark.parametrize("causal", [True, False])
def test_score_mod_equals_score_bias(causal):
    pe = _pe(bidirectional=not causal)
    x = torch.randn(2, 10, C)
    lq = 4
    pos = torch.arange(10)
    at = HookContext.for_positions(pos[-lq:], pos, causal=causal, key_terms=pe.token_terms(x))
    q, k = torch.randn(2, H, lq, D), torch.randn(2, H, 10, D)
    bias = pe.score_bias(q, k, at)
    b, h, qi, ki = torch.meshgrid(torch.arange(2), torch.arange(H), torch.arange(lq),
                                  torch.arange(10), indexing="ij")
    got = pe.score_mod(q, k, at)(torch.zeros(b.shape), b, h, qi, ki)
    assert_close(got, bias)
    assert not bias.isclose(torch.zeros(())).all()


def test_bidirectional_form_sees_later_keys_through_the_second_gates():
    pe = _pe(bidirectional=True)
    x = torch.randn(1, 6, C)
    bias = pe.score_bias(None, None, _context(pe, x, causal=False))[0]     # (H, 6, 6)
    log_g = torch.nn.functional.logsigmoid(pe.later_gate_proj(x))[0].T    # (H, 6)
    log_f = torch.nn.functional.logsigmoid(pe.gate_proj(x))[0].T
    assert_close(bias[:, 1, 4], log_g[:, 2:5].sum(-1))                  # l = i+1..j
    assert_close(bias[:, 4, 1], log_f[:, 2:5].sum(-1))                  # l = j+1..i
    assert_close(bias.diagonal(dim1=1, dim2=2), torch.zeros(H, 6))


def test_bad_options_and_contexts_are_one_line_errors():
    def build(**options):
        return build_encoding("forget_gate", n_heads=H, head_dim=D, **options)

    raises_one_line(r"bias_init must be a number in \[-30.0, 30.0\], got 'high'", build,
                    bias_init="high")
    raises_one_line(r"bidirectional must be True or False, got 1", build, bidirectional=1)
    pe = build()
    x = torch.randn(1, 5, C)
    raises_one_line(r"forget_gate reads the attention's input: its hooks need "
                    r"at.key_terms", pe.score_bias, None, None,
                    HookContext.for_positions(torch.arange(5), causal=True))
    raises_one_line(r"built for causal attention \(bidirectional=False\)", pe.score_bias,
                    None, None, _context(pe, x, causal=False))
    raises_one_line(r"at.key_terms must be \(batch, 4, 5, 1\)", pe.score_bias, None, None,
                    HookContext.for_positions(torch.arange(5), causal=True,
                                              key_terms=torch.zeros(1, 4, 5, 2)))
    raises_one_line(r"forget_gate reads the attention input x \(batch, length, 32\)",
                    pe.token_terms, torch.randn(1, 5, 16))


def test_training_gradients_agree_across_backends():
    """The input, the projections and the encoding's parameters get the same gradients
    through the fused CPU attention (backend "sdpa" in training) as through eager."""
    assert_backend_grads_agree(_pe())
