"""KERPLE and FIRE: formulas, translation properties, score_mod = score_bias, flex = eager,
cached decoding, gradients and option errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc import build_encoding
from posenc.attention import attend

H, D = 2, 8
V = 48


def _pe(name, **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=64, **options)


def _randomize(pe, seed=2):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return pe


def _decode(model, ids, prefill):
    caches = model.make_caches(ids.shape[0], ids.shape[1])
    parts = [model(ids[:, :prefill], caches=caches)]
    parts += [model(ids[:, i:i + 1], caches=caches) for i in range(prefill, ids.shape[1])]
    return torch.cat(parts, dim=1)


CASES = [("kerple", {}), ("kerple", {"variant": "power"}), ("fire", {}),
         ("fire", {"init_L": 4.0})]


# ------------------------------------------------------------------------------ KERPLE
@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_formula_and_translation_invariance(variant):
    pe = _randomize(_pe("kerple", variant=variant))
    r1, r2 = F.softplus(pe.raw_r1), pe.r2
    q_pos, k_pos = torch.arange(4, 9), torch.arange(12)
    bias = pe.score_bias(None, None, q_pos, k_pos)[0]                   # (H, Lq, Lk)
    dist = (q_pos[:, None] - k_pos[None, :]).abs().float()
    if variant == "log":
        want = -r1[:, None, None] * torch.log(1 + r2[:, None, None] * dist)
    else:
        assert ((r2 > 0) & (r2 < 2)).all()
        want = -r1[:, None, None] * dist ** r2[:, None, None]
    assert_close(bias, want)
    assert_close(pe.score_bias(None, None, q_pos + 37, k_pos + 37)[0], bias)
    assert (bias <= 0).all() and (bias[:, :, 4:] - bias[:, :, 3:-1] != 0).any()


def test_kerple_power_gradient_is_finite_at_distance_zero():
    pe = _pe("kerple", variant="power")
    pe.distance_bias(torch.arange(-3, 4)).sum().backward()
    for p in pe.parameters():
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_kerple_options():
    with pytest.raises(ValueError, match="variant must be one of 'log', 'power'"):
        _pe("kerple", variant="gauss")


# -------------------------------------------------------------------------------- FIRE
def _fire_reference(pe, q_pos, k_pos):
    """FIRE written out from the paper: f(psi(i - j) / psi(max(L, i))) -> (H, Lq, Lk)."""
    c = pe.c
    psi = lambda x: torch.log(torch.abs(c * x) + 1)
    i, j = q_pos.float()[:, None], k_pos.float()[None, :]
    threshold = (pe.L_multiplier * pe.init_L).abs()
    x = psi(i - j) / (psi(torch.maximum(i, threshold)) + pe.eps)
    hidden = torch.relu(x[..., None] * pe.w1 + pe.b1)                   # (Lq, Lk, W)
    return torch.einsum("qkw,hw->hqk", hidden, pe.w2) + pe.b2[:, None, None]


def test_fire_formula_and_interpolation():
    pe = _randomize(_pe("fire", init_L=6.0))
    with torch.no_grad():
        pe.c.fill_(0.3)
        pe.L_multiplier.fill_(1.0)
    q_pos, k_pos = torch.arange(20), torch.arange(20)
    assert_close(pe.score_bias(None, None, q_pos, k_pos)[0], _fire_reference(pe, q_pos, k_pos))
    x = pe.normalised_distance(q_pos, k_pos)
    visible = k_pos[None, :] <= q_pos[:, None]
    assert x[visible].min() >= 0 and x[visible].max() <= 1
    # past the threshold every query maps its farthest key (j = 0) to ~1: progressive
    # interpolation keeps the input range fixed whatever the length
    assert_close(x[6:, 0], torch.ones(14), atol=1e-5, rtol=0)
    # below the threshold the bias depends on i - j only
    bias = pe.score_bias(None, None, q_pos, k_pos)[0]
    assert_close(bias[:, 3, 1], bias[:, 5, 3])
    assert (bias[:, 12, 10] - bias[:, 3, 1]).abs().max() > 1e-4       # above it, on i too


@pytest.mark.parametrize("options,match", [
    ({"mlp_width": 0}, "mlp_width"), ({"init_c": 0.0}, "init_c"),
    ({"init_L": -1.0}, "init_L"), ({"eps": 0.0}, r"eps must be a number in \(0.0, inf\)")])
def test_fire_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe("fire", **options)


# ---------------------------------------------------------------- shared guarantees
@pytest.mark.parametrize("name,options", CASES, ids=str)
def test_score_mod_equals_score_bias(name, options):
    pe = _randomize(_pe(name, **options))
    q_pos, k_pos = torch.arange(11, 16), torch.arange(3, 16)
    bias = pe.score_bias(None, None, q_pos, k_pos).expand(1, H, 5, 13)
    mod = pe.score_mod(torch.zeros(1, H, 5, 1), None, q_pos, k_pos)
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
            ref = attend(q, k, v, pe, q_pos, k_pos, causal=True, backend="eager")[0]
            out = attend(q, k, v, pe, q_pos, k_pos, causal=True, backend="flex")[0]
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
