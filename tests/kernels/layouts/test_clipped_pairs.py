"""Clipped-distance tables spread over a causal square block, as a tensor and fused into
attention logits (Shaw's key term)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.attention.biased import BiasedSpec, biased_attention
from posenc.encodings import build_encoding
from posenc.encodings.shaw import ShawEncoding
from posenc.kernels.layouts.clipped_pairs import ClippedPairBias, collect_clipped, spread_clipped
from tests.helpers import causal_layer_grads

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("clip", [1, 3, 8, 20])
def test_clipped_spread_and_collect_equal_gather_and_scatter(clip):
    """A causal square block: spreading a clipped-distance table over the pairs equals the
    gather at clip(j - i) (visible pairs; zero elsewhere), collecting equals the scatter-add of
    the visible pairs, and both carry the same gradients."""
    n = 9
    gen = torch.Generator().manual_seed(2)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    index = (clip - (i - j).clamp(0, clip)).expand(2, 3, n, n)        # exact where j <= i
    seen = (j <= i).expand(2, 3, n, n)
    table = torch.randn(2, 3, n, clip + 1, generator=gen, requires_grad=True)
    spread = spread_clipped(table, clip)
    want = torch.where(seen, table.gather(-1, index), 0.0)
    assert_close(spread, want)
    grad = torch.randn(2, 3, n, n, generator=gen) * seen
    assert_close(torch.autograd.grad(spread, table, grad)[0],
                 torch.autograd.grad(want, table, grad)[0])
    pairs = (torch.randn(2, 3, n, n, generator=gen) * seen).requires_grad_()
    collected = collect_clipped(pairs, clip)
    want = torch.zeros(2, 3, n, clip + 1).scatter_add(-1, index, pairs * seen)
    assert_close(collected, want)
    grad = torch.randn(2, 3, n, clip + 1, generator=gen)
    got_grad, want_grad = (torch.autograd.grad(t, pairs, grad)[0] for t in (collected, want))
    assert_close(got_grad[seen], want_grad[seen])


@pytest.mark.parametrize("length,clip,with_weights", [
    (9, 3, False), (80, 5, False), (80, 100, False), (80, 5, True)])
def test_fused_attention_equals_attention_with_the_spread_tensor(length, clip, with_weights):
    """Attention writing the spread table into its logits (row blocks from L = 64 on, one
    block when it hands out the weights) equals attention given spread_clipped's tensor:
    output, weights, and the gradients of q, k, v and the table."""
    gen = torch.Generator().manual_seed(length + clip)
    q, k, v = (torch.randn(2, 3, length, 4, generator=gen).requires_grad_() for _ in range(3))
    table = torch.randn(2, 3, length, clip + 1, generator=gen).requires_grad_()
    leaves = (q, k, v, table)
    results = []
    for bias in (ClippedPairBias(table, clip), spread_clipped(table, clip)):
        out = biased_attention(q, k, v, bias,
                               BiasedSpec(causal=True, scale=0.4, with_weights=with_weights))
        outs = out if with_weights else (out,)
        grads = [torch.randn(o.shape, generator=torch.Generator().manual_seed(1)) for o in outs]
        results.append((outs, torch.autograd.grad(outs, leaves, grads)))
    (fused_out, fused_grads), (plain_out, plain_grads) = results
    for got, want in zip((*fused_out, *fused_grads), (*plain_out, *plain_grads)):
        assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_blocks_must_cover_the_rows_in_order():
    bias = ClippedPairBias(torch.zeros(1, 1, 8, 3), 2)
    with pytest.raises(ValueError, match="cover the rows in order"):
        bias.grads([(4, torch.zeros(1, 1, 4, 8))])


def _shaw_layer_grads(options: dict):
    return causal_layer_grads(build_encoding("shaw", n_heads=2, head_dim=8,
                                             max_relative_position=5, **options))


@pytest.mark.parametrize("options", [{}, {"relative_values": False}],
                         ids=("key-and-value", "key-only"))
def test_shaw_layer_trains_the_same_fused_and_through_the_tensor(monkeypatch, options):
    """A causal Shaw layer writes its key term into the logits (eager with the value term,
    sdpa's fused attention without it) and trains exactly as with the spread tensor."""
    calls = []
    original = ClippedPairBias.write
    monkeypatch.setattr(ClippedPairBias, "write",
                        lambda self, *a: calls.append(a[1]) or original(self, *a))
    out, grads = _shaw_layer_grads(options)
    assert calls == ([0] if options == {} else [0, 32, 64])  # row blocks unless weights out
    monkeypatch.setattr(ShawEncoding, "fused_bias", lambda self, *a, **kw: None)
    want_out, want_grads = _shaw_layer_grads(options)
    assert_close(out, want_out)
    for g, w in zip(grads, want_grads):
        assert_close(g, w, rtol=1e-5, atol=1e-5)
