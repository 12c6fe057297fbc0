"""The native pair kernels, through the row-group tables of a causal square block, against
the relative-shift views: values and gradients across the kernels' blocks and tiles, blocks
written with hidden pairs masked, fused attention, a DeBERTa layer with and without them, and
what they decline."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.attention.biased import BiasedSpec, biased_attention
from posenc.encodings import build_encoding
from posenc.encodings.context import HookContext
from posenc.kernels.layouts.causal_pairs import CausalPairBias, causal_pair_bias
from posenc.kernels.layouts.relative_shift import head_table, pair_layout
from tests.helpers import causal_layer_grads
from tests.kernels.helpers import pair_leaves as _leaves

pytestmark = pytest.mark.usefixtures("single_thread")
needs_kernel = pytest.mark.usefixtures("native_pairs")


def _views(q, k, hq, hk):
    """The reference: full (L, L) tables read through the causal layout's views."""
    pos = torch.arange(q.shape[2])
    layout = pair_layout(pos, pos, True, consecutive=True)
    return layout.query_rows(head_table(q, hq)) + layout.key_rows(head_table(k, hk))


@needs_kernel
@pytest.mark.parametrize("length", [2, 7, 8, 9, 40, 72, 130])
@pytest.mark.parametrize("batch,heads", [(3, 2), (1, 4)])
def test_materialized_bias_equals_the_views(length, batch, heads):
    """Values at visible pairs, zeros at hidden ones, and the gradients of q, k and both head
    tables: those of full tables read through the views (lengths below, at and across the
    kernels' 8 x 8 blocks, 32 x 32 tiles and the row groups)."""
    leaves = _leaves(batch, heads, length, seed=length)
    got = causal_pair_bias(*leaves).materialize()
    want = _views(*leaves)
    seen = torch.ones(length, length, dtype=torch.bool).tril()
    assert_close(got[..., seen], want[..., seen])
    assert not got[..., ~seen].any()
    grad = torch.randn(batch, heads, length, length) * seen
    for g, w in zip(torch.autograd.grad(got, leaves, grad),
                    torch.autograd.grad(want, leaves, grad)):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("split", [9, 64, 100])
def test_blocks_are_written_with_hidden_pairs_masked(split):
    """write() fills a block of rows with the bias and -inf at hidden pairs, for any first
    row and key count; grads() takes the gradient as row blocks."""
    length = 130
    q, k, hq, hk = _leaves(2, 2, length, seed=4)
    bias = causal_pair_bias(q, k, hq, hk)
    want = _views(q, k, hq, hk).detach()
    seen = torch.ones(length, length, dtype=torch.bool).tril()
    first = torch.empty(2, 2, split, split + 3)
    bias.write(first, 0)
    assert_close(first, want[:, :, :split, :split + 3].masked_fill(
        ~seen[:split, :split + 3], float("-inf")))
    rest = torch.empty(2, 2, length - split, length)
    bias.write(rest, split)
    assert_close(rest, want[:, :, split:].masked_fill(~seen[split:], float("-inf")))
    grad = torch.randn(2, 2, length, length) * seen
    by_blocks = bias.grads([(0, grad[:, :, :split, :split].contiguous()),
                            (split, grad[:, :, split:].contiguous())])
    assert all(torch.equal(a, b) for a, b in zip(by_blocks, bias.grads([(0, grad)])))
    with pytest.raises(ValueError, match="cover the rows in order"):
        bias.grads([(split, grad[:, :, split:].contiguous())])


@needs_kernel
@pytest.mark.parametrize("length", [40, 130])
def test_fused_attention_equals_attention_with_the_bias_tensor(length):
    """Biased attention writing the bias into its logits (row blocks included, from
    L = 64 on) equals the same attention given the materialized bias: output and the
    gradients of q, k, v and of both head tables."""
    q, k, hq, hk = _leaves(2, 2, length, seed=5)
    v = torch.randn(2, 2, length, 5, requires_grad=True)
    leaves = (q, k, v, hq, hk)
    fused = biased_attention(q, k, v, causal_pair_bias(q, k, hq, hk),
                             BiasedSpec(causal=True, scale=0.3))
    plain = biased_attention(q, k, v, _views(q, k, hq, hk), BiasedSpec(causal=True, scale=0.3))
    assert_close(fused, plain)
    grad = torch.randn_like(fused)
    for g, w in zip(torch.autograd.grad(fused, leaves, grad),
                    torch.autograd.grad(plain, leaves, grad)):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_fused_attention_rejects_another_mask_or_shape():
    q, k, hq, hk = _leaves(1, 2, 12, seed=6)
    bias = causal_pair_bias(q, k, hq, hk)
    with pytest.raises(ValueError, match="masks the hidden pairs of a causal block"):
        biased_attention(q, k, k, bias, BiasedSpec(causal=False, scale=1.0))
    with pytest.raises(ValueError, match="fused bias of shape"):
        biased_attention(q[:, :, :6], k, k, bias, BiasedSpec(causal=True, scale=1.0))


def test_tables_decline_what_the_kernels_cannot_take(monkeypatch):
    """float64 tensors and POSENC_NATIVE_KERNELS=0 give None (callers use the views)."""
    q, k, hq, hk = (t.detach() for t in _leaves(1, 2, 6, seed=7))
    assert causal_pair_bias(q.double(), k.double(), hq.double(), hk.double()) is None
    monkeypatch.setenv("POSENC_NATIVE_KERNELS", "0")
    assert causal_pair_bias(q, k, hq, hk) is None


def _deberta_layer_grads():
    return causal_layer_grads(build_encoding(
        "deberta", n_heads=2, head_dim=8, max_len=80, position_buckets=64,
        max_relative_positions=128), first_pos=5)


@needs_kernel
def test_deberta_layer_trains_the_same_with_and_without_the_kernels(monkeypatch):
    """A causal DeBERTa layer (fused attention over row-group tables) gives the output and
    gradients of the view path (POSENC_NATIVE_KERNELS=0), and takes the fused path."""
    calls = []
    original = CausalPairBias.write
    monkeypatch.setattr(CausalPairBias, "write",
                        lambda self, *a, **kw: calls.append(a) or original(self, *a, **kw))
    out, grads = _deberta_layer_grads()
    assert [c[1] for c in calls] == [0, 32, 64]            # three row blocks
    monkeypatch.setenv("POSENC_NATIVE_KERNELS", "0")
    want_out, want_grads = _deberta_layer_grads()
    assert_close(out, want_out)
    for g, w in zip(grads, want_grads):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::UserWarning")        # dynamo on the views' graph breaks
def test_compiled_code_never_reaches_the_pair_kernels(monkeypatch):
    """Under torch.compile the pair kernels decline (they are ctypes calls, not custom ops:
    kernels/pairs.py says why) and DeBERTa's causal bias comes from the tensor-op views,
    with the numbers of the eager views."""
    calls = []
    for name in ("write", "grads"):
        original = getattr(CausalPairBias, name)
        monkeypatch.setattr(CausalPairBias, name, lambda self, *a, original=original:
                            calls.append(name) or original(self, *a))
    q, k, hq, hk = _leaves(1, 2, 40, seed=8)
    assert torch.compile(causal_pair_bias, backend="eager", fullgraph=True)(q, k, hq, hk) \
        is None
    pe = build_encoding("deberta", n_heads=2, head_dim=5, max_len=64, position_buckets=32,
                        max_relative_positions=64)
    pos = torch.arange(3, 43)

    def bias(q, k):
        return pe.score_bias(q, k,
                             HookContext.for_positions(pos, pos, causal=True, consecutive=True))
    compiled = torch.compile(bias, backend="eager")(q, k)
    compiled_grads = torch.autograd.grad(compiled.sum(), (q, k))
    assert calls == []
    monkeypatch.setenv("POSENC_NATIVE_KERNELS", "0")
    eager = bias(q, k)
    assert_close(compiled, eager)
    for g, w in zip(compiled_grads, torch.autograd.grad(eager.sum(), (q, k))):
        assert_close(g, w)
