"""Absolute encodings: ``nope`` and the ``learned`` table; and what every absolute
encoding beyond them (multiplicative, hierarchical, recurrent, floater, complex_order, conv)
guarantees: cached decoding equal to a full forward pass, gradients that reach every parameter,
positions that change the logits."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import LMConfig, TransformerLM, build_encoding
from posenc.encodings.context import HookContext

pytestmark = pytest.mark.usefixtures("single_thread")


def _learned_model(max_len=8):
    return TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1,
                                  max_len=max_len, pe="learned")).eval()


V = 48

CASES = [
    ("multiplicative", {}),
    ("multiplicative", {"positions": "sinusoidal"}),
    ("hierarchical", {"base_len": 6}),
    ("recurrent", {}),
    ("floater", {}),
    ("floater", {"method": "dopri5", "rtol": 1e-6, "atol": 1e-8}),
    ("complex_order", {"vocab_size": V}),
    ("conv", {"kernel_size": 3}),
]


def _decode(model, ids, prefill):
    """Logits from a prefill of ``prefill`` tokens, then one token at a time."""
    caches = model.make_caches(ids.shape[0], ids.shape[1])
    parts = [model(ids[:, :prefill], caches=caches)]
    parts += [model(ids[:, i:i + 1], caches=caches) for i in range(prefill, ids.shape[1])]
    return torch.cat(parts, dim=1)


def test_learned_adds_its_trainable_table():
    pe = build_encoding("learned", n_heads=2, head_dim=4, max_len=10)
    assert pe.table.shape == (10, 8) and pe.table.requires_grad
    x = torch.randn(3, 4, 8)
    pos = torch.tensor([9, 0, 4, 4])
    out = pe.embed(x, pos)
    assert_close(out, x + pe.table[pos])
    out.sum().backward()
    grad = torch.zeros(10, 8)
    grad[9], grad[0], grad[4] = 3.0, 3.0, 6.0                   # batch 3, position 4 twice
    assert_close(pe.table.grad, grad)


def test_learned_table_edge_is_usable_and_past_it_raises():
    pe = build_encoding("learned", n_heads=1, head_dim=4, max_len=6)
    pe.embed(torch.zeros(1, 6, 4), torch.arange(6))             # positions 0..5: fine
    with pytest.raises(ValueError, match=r"max_len"):
        pe.embed(torch.zeros(1, 1, 4), torch.tensor([6]))
    with pytest.raises(ValueError, match=r"\[0, 6\)"):
        pe.embed(torch.zeros(1, 1, 4), torch.tensor([-1]))


def test_nope_changes_nothing():
    pe = build_encoding("nope", n_heads=2, head_dim=4)
    x = torch.randn(1, 3, 8)
    assert pe.embed(x, torch.arange(3)) is x
    q, k = torch.randn(2, 1, 2, 3, 4).unbind(0)
    assert pe.transform_qk(q, k,
                           HookContext.for_positions(torch.arange(3), torch.arange(3))) == (q, k)
    assert pe.score_bias(q, k, HookContext.for_positions(torch.arange(3), torch.arange(3))) is None
    assert pe.hook_kinds() == [] and pe.backends() == ("sdpa", "flex", "eager")


@torch.no_grad()
def test_nope_model_still_sees_order_through_the_causal_mask(tiny_lm):
    model = tiny_lm("nope", n_layers=1)         # one layer: later rows see a set of tokens
    ids = torch.randint(0, 48, (1, 8))
    swapped = ids[:, [1, 0, 2, 3, 4, 5, 6, 7]]
    a, b = model(ids), model(swapped)
    assert_close(a[:, 2:], b[:, 2:], atol=1e-5, rtol=1e-5)      # same set of earlier tokens
    assert (a[:, 0] - b[:, 0]).abs().max() > 1e-3


def test_learned_table_exceeded_in_forward():
    model = _learned_model()
    model(torch.zeros(1, 8, dtype=torch.long))                 # exactly the table: fine
    with pytest.raises(ValueError, match=r"position 8 .*\[0, 8\) \(max_len=8\)"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=8"):
        model(torch.zeros(1, 2, dtype=torch.long), positions=torch.tensor([7, 8]))


def test_learned_table_exceeded_in_generate():
    model = _learned_model()
    # the last new token is never fed back, so 5 + 4 tokens only encode positions 0..7
    assert model.generate(torch.zeros(1, 5, dtype=torch.long), 4).shape == (1, 9)
    with pytest.raises(ValueError, match="position 8 .*max_len=8"):
        model.generate(torch.zeros(1, 5, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="max_len=8"):
        model.generate(torch.zeros(1, 9, dtype=torch.long), 1)


# ------------------------------------- every absolute encoding beyond nope and learned
@pytest.mark.parametrize("name,options", CASES, ids=str)
def test_cached_decoding_equals_full_forward(name, options, tiny_lm):
    model = tiny_lm(name, options, max_len=32)
    ids = torch.randint(0, V, (2, 14))
    with torch.no_grad():
        full = model(ids)
        assert_close(_decode(model, ids, prefill=5), full, atol=1e-5, rtol=1e-5)
        assert_close(model(ids, backend="eager"), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,options", CASES, ids=str)
def test_gradients_reach_every_parameter(name, options, tiny_lm):
    model = tiny_lm(name, options, max_len=32).train()
    model(torch.randint(0, V, (2, 10))).logsumexp(-1).mean().backward()
    params = dict(model.pe.named_parameters())
    assert params or options.get("positions") == "sinusoidal"
    for pname, p in params.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_position_dependence(tiny_lm):
    """Each encoding makes the model position-aware: a shifted start changes the logits."""
    ids = torch.randint(0, V, (1, 8))
    for name, options in CASES:
        model = tiny_lm(name, options, max_len=32)
        with torch.no_grad():
            a = model(ids)
            b = model(ids, positions=torch.arange(8) + 3)
        if name == "conv":          # position only through padding: shifts are invisible
            assert_close(a, b)
        else:
            assert (a - b).abs().max() > 1e-3, name
