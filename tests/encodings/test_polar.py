"""PoPE (polar coordinate position embeddings): against x-transformers' ``PolarEmbedding``
inside its ``Attention`` with copied weights, the score formula by hand, the relative
property, option errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.attention import attend
from posenc.attention.context import AttentionCall
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext

pytestmark = pytest.mark.usefixtures("single_thread")

H, D = 2, 8


def _pope(**options):
    return build_encoding("pope", n_heads=H, head_dim=D, **options)


def _scores(pe, q, k, q_pos, k_pos):
    """q (1, H, Lq, D), k (1, H, Lk, D) -> q'.k' (1, H, Lq, Lk) after PoPE."""
    qp, kp = pe.transform_qk(q, k, HookContext.for_positions(q_pos, k_pos))
    return qp @ kp.transpose(-1, -2)


@pytest.mark.parametrize("uniform,offset", [(False, 0), (True, 0), (True, 100)])
@torch.no_grad()
def test_matches_x_transformers_attention(uniform, offset):
    """At small positions: x-transformers adds the key bias to the fp32 phases pos * theta,
    which rounds the sum to the ulp of pos * theta (about 3e-5 rad near 1000); posenc adds it
    by the angle-sum identities. The formula test below checks far positions in float64."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(0)
    attn = xt.Attention(dim=H * D, heads=H, dim_head=D, causal=True).eval()
    polar = xt.PolarEmbedding(D, H, bias_uniform_init=uniform)
    pe = _pope(bias_init="uniform" if uniform else "zeros")
    pe.phase_bias.copy_(polar.learned_bias[:, 0])
    if not uniform:        # move the bias off zero in both (x-transformers' init is zero)
        pe.phase_bias.uniform_(-2 * math.pi, 0.0)
        polar.learned_bias.copy_(pe.phase_bias[:, None])
    t = 7
    x = torch.randn(2, t, H * D)
    pos = torch.arange(offset, offset + t)
    want = attn(x, polar_pos_emb=polar(pos))

    def heads(w):
        return (x @ w.weight.T).view(2, t, H, D).transpose(1, 2)

    call = AttentionCall.for_positions(pos, pos, causal=True, backend="eager")
    q, k = pe.transform_qk(heads(attn.to_q), heads(attn.to_k), call.at)
    out, _ = attend(q, k, heads(attn.to_v), pe, call)
    got = attn.to_out(out.transpose(1, 2).reshape(2, t, H * D))
    assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the scores themselves, and the check can fail: without the key bias they differ
    freqs, bias = polar(pos)
    q, k = heads(attn.to_q), heads(attn.to_k)
    theirs = xt.apply_polar_pos_emb(q, freqs) @ xt.apply_polar_pos_emb(k, freqs + bias).mT
    assert_close(_scores(pe, q, k, pos, pos), theirs, atol=1e-5, rtol=1e-5)
    no_bias = xt.apply_polar_pos_emb(q, freqs) @ xt.apply_polar_pos_emb(k, freqs).mT
    assert (no_bias - theirs).abs().max() > 1e-2


@pytest.mark.parametrize("m,n", [(9, 4), (1_000_003, 999_990)])
def test_score_formula_by_hand(m, n):
    """Far past 2^16 too, where the angles are exact products reduced modulo 2 pi (x-
    transformers' fp32 products are off by up to pos * 2^-24 rad there)."""
    pe = _pope(bias_init="uniform", theta=100.0)
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, H, 1, D, generator=g), torch.randn(1, H, 1, D, generator=g)
    got = _scores(pe, q, k, torch.tensor([m]), torch.tensor([n]))[0, :, 0, 0]
    freq = 100.0 ** (-torch.arange(D, dtype=torch.float64) / D)
    delta = pe.phase_bias.detach().double().clamp(-2 * math.pi, 0)               # (H, D)
    want = (F.softplus(q[0, :, 0].double()) * F.softplus(k[0, :, 0].double())
            * torch.cos((m - n) * freq - delta)).sum(-1)
    assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_scores_depend_only_on_relative_position_and_width_doubles():
    pe = _pope(bias_init="uniform")
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(1, H, 4, D, generator=g), torch.randn(1, H, 4, D, generator=g)
    pos = torch.arange(4)
    base = _scores(pe, q, k, pos, pos)
    assert_close(_scores(pe, q, k, pos + 1000, pos + 1000), base, atol=1e-4, rtol=0)
    assert (_scores(pe, q, k, pos, pos + 1) - base).abs().max() > 1e-3
    qp, kp = pe.transform_qk(q, k, HookContext.for_positions(pos))
    assert qp.shape == kp.shape == (1, H, 4, 2 * D)


def test_phase_bias_is_clamped_and_learned():
    pe = _pope()
    assert (pe.phase_bias == 0).all() and pe.phase_bias.requires_grad
    with torch.no_grad():
        pe.phase_bias.fill_(3.0)
    assert (pe.key_phase_bias() == 0).all()
    with torch.no_grad():
        pe.phase_bias.fill_(-10.0)
    assert_close(pe.key_phase_bias(), torch.full((1, H, 1, D), -2 * math.pi))


@pytest.mark.parametrize("options,message", [
    ({"bias_init": "normal"}, "bias_init must be one of 'zeros', 'uniform'"),
    ({"theta": 0.5}, r"theta must be a number in \(1.0, inf\)"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        _pope(**options)
