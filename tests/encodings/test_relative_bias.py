"""Biases of the distance k_pos - q_pos (``DistanceBiasEncoding``) and the bias family:
translation invariance and per-head checks; for KERPLE and FIRE, score_mod = score_bias,
flex = eager, cached decoding and gradients."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.attention import attend
from posenc.attention.context import AttentionCall
from posenc.encodings.context import HookContext
from tests.encodings.helpers import D, H
from tests.encodings.helpers import build as _pe
from tests.encodings.helpers import randomize as _randomize
from tests.helpers import raises_one_line as _raises

pytestmark = pytest.mark.usefixtures("single_thread")

V = 48


def _decode(model, ids, prefill):
    caches = model.make_caches(ids.shape[0], ids.shape[1])
    parts = [model(ids[:, :prefill], caches=caches)]
    parts += [model(ids[:, i:i + 1], caches=caches) for i in range(prefill, ids.shape[1])]
    return torch.cat(parts, dim=1)


CASES = [("kerple", {}), ("kerple", {"variant": "power"}), ("fire", {}),
         ("fire", {"init_L": 4.0})]


@pytest.mark.parametrize("name,options", [
    ("alibi", {}), ("alibi", {"bidirectional": True}),
    ("t5", {}), ("t5", {"bidirectional": True, "num_buckets": 16, "max_distance": 40}),
])
def test_bias_is_translation_invariant(name, options):
    pe = build_encoding(name, n_heads=4, head_dim=8, **options)
    with torch.no_grad():
        for p in pe.parameters():
            p.copy_(torch.randn(p.shape))
    q_pos, k_pos = torch.arange(20, 30), torch.arange(30)
    causal = not options.get("bidirectional", False)
    base = pe.score_bias(None, None, HookContext.for_positions(q_pos, k_pos, causal=causal))
    for shift in (1, 17, 5000):
        at = HookContext.for_positions(q_pos + shift, k_pos + shift, causal=causal)
        assert_close(pe.score_bias(None, None, at), base)
    # and not constant: it depends on the distance
    assert (base[..., -1, -1] - base[..., -1, 0]).abs().max() > 1e-3


@pytest.mark.parametrize("q_heads", [4, 16])
@pytest.mark.parametrize("pe", ["alibi", "t5", "kerple"])
def test_a_per_head_bias_refuses_q_with_other_head_counts(pe, q_heads):
    enc = build_encoding(pe, n_heads=8, head_dim=8)
    pos = torch.arange(3)
    good = torch.randn(1, 8, 3, 8)
    assert enc.score_bias(good, good,
                          HookContext.for_positions(pos, pos, causal=True)).shape == (1, 8, 3, 3)
    q = torch.randn(1, q_heads, 3, 8)
    at = HookContext.for_positions(pos, pos, causal=True)
    _raises(rf"q has {q_heads} heads but this {pe} was built for n_heads=8", enc.score_bias,
            q, q, at)
    _raises(rf"q has {q_heads} heads", enc.score_mod, q, q, at)


# --------------------------------------------------------------------- KERPLE and FIRE
@pytest.mark.parametrize("name,options", CASES, ids=str)
def test_score_mod_equals_score_bias(name, options):
    pe = _randomize(_pe(name, **options))
    q_pos, k_pos = torch.arange(11, 16), torch.arange(3, 16)
    bias = pe.score_bias(None, None, HookContext.for_positions(q_pos, k_pos)).expand(1, H, 5, 13)
    mod = pe.score_mod(torch.zeros(1, H, 5, 1), None, HookContext.for_positions(q_pos, k_pos))
    b, h, qi, ki = torch.meshgrid(torch.arange(1), torch.arange(H), torch.arange(5),
                                  torch.arange(13), indexing="ij")
    assert_close(mod(torch.zeros(b.shape), b, h, qi, ki), bias)


def test_flex_matches_eager():
    """FlexAttention (compiled, forward-only on CPU) on one tiny shape per score_mod."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, H, n, D, generator=gen) for n in (5, 16, 16))
    q_pos, k_pos = torch.arange(11, 16), torch.arange(16)
    for name, options in [("kerple", {}), ("fire", {"mlp_width": 4, "init_L": 4.0})]:
        pe = _randomize(_pe(name, **options))
        with torch.no_grad():
            ref = attend(q, k, v, pe,
                         AttentionCall.for_positions(q_pos, k_pos, causal=True,
                                                     backend="eager"))[0]
            out = attend(q, k, v, pe,
                         AttentionCall.for_positions(q_pos, k_pos, causal=True, backend="flex"))[0]
        assert_close(out, ref, atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("name,options", CASES, ids=str)
def test_model_cached_decoding_and_backends(name, options, tiny_lm):
    model = tiny_lm(name, options, max_len=32)
    assert model.blocks[0].layer_pe is not model.blocks[1].layer_pe   # per-layer parameters
    ids = torch.randint(0, V, (2, 13))
    with torch.no_grad():
        full = model(ids, backend="eager")
        assert_close(model(ids, backend="sdpa"), full, atol=1e-5, rtol=1e-5)
        assert_close(_decode(model, ids, prefill=4), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,options", CASES, ids=str)
def test_gradients_reach_parameters(name, options, tiny_lm):
    model = tiny_lm(name, options, max_len=32).train()
    for block in model.blocks:
        if name == "fire":          # threshold L = init_L, so that it matters (L > i)
            block.layer_pe.L_multiplier.data.fill_(1.0)
    model(torch.randint(0, V, (2, 10)), backend="sdpa").logsumexp(-1).mean().backward()
    for block in model.blocks:
        for pname, p in block.layer_pe.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), pname
            assert p.grad.abs().sum() > 0, pname
