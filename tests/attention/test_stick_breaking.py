"""Stick-breaking attention: equal to fla's reference, to the formula, cached decode equal to
the full forward, with NoPE and with RoPE, and clear refusals."""

from __future__ import annotations

import glob
import importlib.util
import math

import pytest
import torch

from posenc.attention.stick_breaking import (
    check_composes,
    stick_breaking_attention,
    stick_breaking_weights,
)
from posenc.encodings import encoding_class
from posenc.errors import UserError
from posenc.models.lm import LMConfig, TransformerLM


def _fla_naive():
    """fla-core's ``naive_stickbreaking_attn`` loaded by path (its package needs Triton)."""
    paths = glob.glob(f"{torch.__path__[0]}/../fla/ops/stickbreaking_attn/naive.py")
    if not paths:
        pytest.skip("fla-core is not installed")
    spec = importlib.util.spec_from_file_location("fla_sb_naive", paths[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.naive_stickbreaking_attn


@pytest.mark.parametrize("attend_current", [False, True])
def test_equals_fla_reference(attend_current):
    """fla takes (B, T, H, D) and returns the output without the remainder and the
    remainder (B, T, H); ours is (B, H, T, D): the same numbers after a transpose, with
    remainder="drop" for its output and "self" = its output + rem * v. Float32, <= 1e-5."""
    naive = _fla_naive()
    g = torch.Generator().manual_seed(0)
    b, h, t, d = 2, 3, 37, 16
    q, k, v = (torch.randn(b, h, t, d, generator=g) * 1.5 for _ in range(3))
    scale = 1 / math.sqrt(d)
    ref_o, ref_rem = naive(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                           scale=scale, attend_current=attend_current)
    ref_o, ref_rem = ref_o.transpose(1, 2), ref_rem.transpose(1, 2)       # (B, H, T, ...)
    ours, weights = stick_breaking_attention(q, k, v, scale, attend_current=attend_current,
                                             remainder="drop", need_weights=True)
    torch.testing.assert_close(ours, ref_o, atol=1e-5, rtol=0)
    torch.testing.assert_close(1 - weights.sum(-1), ref_rem, atol=1e-5, rtol=0)
    with_self, _ = stick_breaking_attention(q, k, v, scale, attend_current=attend_current)
    torch.testing.assert_close(with_self, ref_o + ref_rem[..., None] * v, atol=1e-5, rtol=0)


def test_weights_follow_the_formula():
    """A_ij = beta_ij prod_{j<k<i} (1 - beta_ik), written out with products in float64."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(1, 1, 6, 6, generator=g, dtype=torch.float64) * 2
    weights, rem = stick_breaking_weights(z, torch.ones(6, 6, dtype=torch.bool).tril())
    beta = torch.sigmoid(z[0, 0])
    expected = torch.zeros(6, 6, dtype=torch.float64)
    for i in range(6):
        for j in range(i):
            expected[i, j] = beta[i, j] * torch.prod(1 - beta[i, j + 1:i])
    torch.testing.assert_close(weights[0, 0], expected)
    torch.testing.assert_close(rem[0, 0], 1 - expected.sum(-1))
    assert weights[0, 0, 0].sum() == 0 and rem[0, 0, 0] == 1     # the first token: no keys


def test_stable_for_large_logits():
    """Saturated logits (|z| = 200): finite weights, rows summing to at most 1."""
    z = torch.tensor([[200.0, -200.0, 200.0, -200.0]]).expand(4, 4).contiguous()
    weights, rem = stick_breaking_weights(z, torch.ones(4, 4, dtype=torch.bool).tril())
    assert torch.isfinite(weights).all() and torch.isfinite(rem).all()
    assert (weights.sum(-1) <= 1 + 1e-6).all()
    assert weights[3, 2] == pytest.approx(1.0)       # the nearest high logit takes the stick


def test_query_chunks_equal_one_pass(monkeypatch):
    import posenc.attention.stick_breaking as sb
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 20, 8, generator=g) for _ in range(3))
    whole, _ = stick_breaking_attention(q, k, v, 0.3)
    monkeypatch.setattr(sb, "QUERY_CHUNK_ELEMENTS", 2 * 20 * 3)          # 3 rows a chunk
    chunked, _ = stick_breaking_attention(q, k, v, 0.3)
    torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=0)


def _model(pe: str, **kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(LMConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=2,
                                  max_len=32, pe=pe, attn_form="stick_breaking", **kw)).eval()


@pytest.mark.parametrize("pe", ["nope", "rope"])
def test_cached_decode_equals_full_forward(pe):
    model = _model(pe)
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(ids)
        caches = model.make_caches(2, 12)
        steps = [model(ids[:, :5], caches=caches)]
        steps += [model(ids[:, i:i + 1], caches=caches) for i in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_rope_changes_the_model_and_nope_is_position_free():
    """With NoPE the order enters through the stick only; RoPE's rotation changes the
    logits, so the same weights give other outputs."""
    ids = torch.randint(0, 50, (1, 10), generator=torch.Generator().manual_seed(4))
    nope, rope = _model("nope"), _model("rope")
    rope.load_state_dict(nope.state_dict())
    with torch.no_grad():
        assert not torch.allclose(nope(ids), rope(ids), atol=1e-4)
        shifted = rope(ids, positions=torch.arange(7, 17))      # RoPE: only distances count
        torch.testing.assert_close(shifted, rope(ids), atol=1e-5, rtol=0)


def test_padding_on_the_left_gives_the_unpadded_outputs():
    model = _model("rope")
    ids = torch.randint(1, 50, (1, 8), generator=torch.Generator().manual_seed(5))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3), torch.ones(1, 8)], dim=1).long()
    with torch.no_grad():
        torch.testing.assert_close(model(padded, attention_mask=mask)[:, 3:], model(ids),
                                   atol=1e-5, rtol=0)


def test_weights_are_returned_and_sum_to_at_most_one():
    model = _model("nope")
    ids = torch.randint(0, 50, (1, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    w = weights[0]
    assert w.shape == (1, 2, 9, 9)
    assert (w.triu() == 0).all()                           # no key at or after the query
    assert (w.sum(-1) <= 1 + 1e-6).all()


def test_trains_with_gradients():
    model = _model("rope").train()
    ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(7))
    loss = torch.nn.functional.cross_entropy(model(ids)[:, :-1].reshape(-1, 50),
                                             ids[:, 1:].reshape(-1))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("pe", ["alibi", "t5", "forget_gate", "shaw"])
def test_refuses_encodings_it_cannot_compose_with(pe):
    with pytest.raises(UserError, match="cannot compose with encoding"):
        LMConfig(pe=pe, attn_form="stick_breaking")


def test_refuses_sinks_and_unknown_forms():
    with pytest.raises(UserError, match="sinks"):
        check_composes(encoding_class("rope"), sinks=True)
    with pytest.raises(UserError, match="attn_form"):
        LMConfig(attn_form="sparsemax")


def test_config_round_trip_keeps_the_form_and_old_dicts_read_the_same():
    cfg = LMConfig(pe="nope", attn_form="stick_breaking")
    assert LMConfig.from_dict(cfg.to_dict()) == cfg
    assert "attn_form" not in LMConfig().to_dict()        # a softmax config saves as before


def test_a_sliding_window_hides_keys_from_the_stick_and_its_cache_stays_exact():
    plan = {"layers": {"cycle": ["local"]}, "types": {"local": {"pe": "rope", "window": 4}}}
    model = _model("rope", plan=plan)
    ids = torch.randint(0, 50, (1, 11), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        full, weights = model(ids, need_weights=True)
        caches = model.make_caches(1, 11)
        steps = [model(ids[:, :3], caches=caches)]
        steps += [model(ids[:, i:i + 1], caches=caches) for i in range(3, 11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert (weights[0][0, :, 10, :7] == 0).all()           # keys outside the last 4 tokens
    assert (weights[0][0, :, 10, 7:10] > 0).all()
