"""CoPE (Golovneva et al., 2024): x-transformers' ``CoPE`` as the oracle (copied embeddings),
the counts it makes when every gate is open or shut, the bidirectional form, and option
errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import attend
from posenc.attention.context import AttentionCall
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from tests.encodings.helpers import assert_backend_grads_agree
from tests.helpers import raises_one_line

pytestmark = pytest.mark.usefixtures("single_thread")

H, D, P = 2, 8, 6


def _pe(**options):
    pe = build_encoding("cope", n_heads=H, head_dim=D, max_pos=P, **options)
    with torch.no_grad():
        pe.pos_emb.copy_(torch.randn(P, D, generator=torch.Generator().manual_seed(5)))
    return pe


def _qkv(lq, lk, scale=1.0):
    gen = torch.Generator().manual_seed(6)
    return (torch.randn(2, H, lq, D, generator=gen) * scale,
            torch.randn(2, H, lk, D, generator=gen) * scale,
            torch.randn(2, H, lk, D, generator=gen))


def _x_transformers(pe):
    xt = pytest.importorskip("x_transformers.x_transformers")
    ref = xt.CoPE(dim=D, heads=H, max_pos=P)
    with torch.no_grad():
        ref.pos_emb.copy_(pe.pos_emb)
    return ref


def _masked_logits(q, k):
    """x-transformers' logits: q.k / sqrt(D), the pairs after the query at -max float."""
    lq, lk = q.shape[2], k.shape[2]
    sim = q @ k.transpose(-1, -2) / math.sqrt(D)
    hidden = torch.ones(lq, lk, dtype=torch.bool).triu(lk - lq + 1)
    return sim.masked_fill(hidden, -torch.finfo(sim.dtype).max), hidden


@pytest.mark.parametrize("lq,lk", [(12, 12), (5, 14), (1, 9)])
def test_term_equals_x_transformers_cope(lq, lk):
    """Gates of every size (logits of scale ~3 around 0) and counts past max_pos."""
    pe = _pe()
    ref = _x_transformers(pe)
    q, k, _ = _qkv(lq, lk, scale=1.7)
    sim, _ = _masked_logits(q, k)
    pos = torch.arange(lk)
    at = HookContext.for_positions(pos[lk - lq:], pos, causal=True)
    assert_close(pe.score_bias(q, k, at), ref(q, sim), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "eager"])
def test_attention_output_equals_x_transformers(backend):
    pe = _pe()
    ref = _x_transformers(pe)
    q, k, v = _qkv(7, 13, scale=1.7)
    sim, hidden = _masked_logits(q, k)
    want = (sim + ref(q, sim)).masked_fill(hidden, float("-inf")).softmax(-1) @ v
    pos = torch.arange(13)
    for grad in (False, True):                       # "sdpa" with gradients runs as "fused"
        with torch.set_grad_enabled(grad):
            call = AttentionCall.for_positions(pos[6:], pos, causal=True, backend=backend)
            assert_close(attend(q.requires_grad_(grad), k, v, pe, call)[0], want,
                         atol=1e-5, rtol=1e-5)


def test_open_gates_count_every_key_and_shut_gates_none():
    """q = k = a large vector: every gate is 1, p_ij = i - j + 1 (capped at max_pos - 1);
    q = -k: every gate is 0, p_ij = 0."""
    pe = _pe()
    big = torch.full((1, H, 9, D), 30.0)
    pos = torch.arange(9)
    at = HookContext.for_positions(pos, pos, causal=True)
    per_pos = big[0, :, 0] @ pe.pos_emb.T                                # (H, P)
    counts = (pos[:, None] - pos[None, :] + 1).clamp(0, P - 1)
    seen = pos[None, :] <= pos[:, None]
    got = pe.score_bias(big, big, at)[0]                                 # (H, 9, 9)
    assert_close(got[:, seen], per_pos[:, counts][:, seen])
    shut = pe.score_bias(big, -big, at)[0]
    assert_close(shut, per_pos[:, :1, None].expand(H, 9, 9))


def test_bidirectional_form_counts_from_the_query_to_later_keys():
    pe = _pe(bidirectional=True)
    causal = _pe()
    q, k, _ = _qkv(8, 8)
    pos = torch.arange(8)
    both = pe.score_bias(q, k, HookContext.for_positions(pos, pos, causal=False))
    before = causal.score_bias(q, k, HookContext.for_positions(pos, pos, causal=True))
    seen = pos[None, :] <= pos[:, None]
    assert_close(both[..., seen], before[..., seen])
    gates = torch.sigmoid(q @ k.transpose(-1, -2) / math.sqrt(D))
    p = gates[..., 2, 2:6].sum(-1).clamp(max=P - 1)                      # query 2, key 5
    per_pos = q[..., 2, :] @ pe.pos_emb.T                                # (B, H, P)
    lo = p.floor()
    want = per_pos.gather(-1, lo.long()[..., None])[..., 0] * (1 - (p - lo)) + \
        per_pos.gather(-1, p.ceil().long()[..., None])[..., 0] * (p - lo)
    assert_close(both[..., 2, 5], want)


def test_cope_reads_no_position():
    pe = _pe()
    q, k, _ = _qkv(4, 4)
    a = pe.score_bias(q, k, HookContext.for_positions(torch.arange(4), causal=True))
    b = pe.score_bias(q, k, HookContext.for_positions(torch.tensor([0, 5, 6, 40]),
                                                      causal=True))
    assert_close(a, b)
    assert pe.position_free and pe.translation_invariant and pe.per_layer
    assert pe.backends() == ("sdpa", "eager")                  # no score_mod: no flex


def test_bad_options_are_one_line_errors():
    raises_one_line(r"max_pos must be an integer >= 2, got 1", build_encoding, "cope",
                    n_heads=H, head_dim=D, max_pos=1)
    raises_one_line(r"bidirectional must be True or False, got 'no'", build_encoding, "cope",
                    n_heads=H, head_dim=D, bidirectional="no")
    q, k, _ = _qkv(3, 3)
    raises_one_line(r"this cope is built for causal attention \(bidirectional=False\)",
                    _pe().score_bias, q, k, HookContext.for_positions(torch.arange(3)))


def test_training_gradients_agree_across_backends():
    """The input, the projections and the encoding's parameters get the same gradients
    through the fused CPU attention (backend "sdpa" in training) as through eager."""
    assert_backend_grads_agree(_pe())


def test_a_table_longer_than_any_gate_count_is_refused_before_it_is_allocated():
    raises_one_line(r"max_pos must be at most 65536, got 1000000000: CoPE's positions count "
                    "gates", build_encoding, "cope", n_heads=H, head_dim=D, max_pos=10 ** 9)
    assert build_encoding("cope", n_heads=H, head_dim=D, max_pos=65536).max_pos == 65536
