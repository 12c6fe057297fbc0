"""Learned per-head sink logits against gpt-oss's attention in transformers, on every backend,
with windows, padding and a KV cache."""

import types

import pytest
import torch

from posenc.attention import AttentionCall, AttentionContext, Masks, MultiHeadAttention, attend
from posenc.attention.cache import make_caches
from posenc.attention.masks import Window
from posenc.encodings import build_encoding

gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")


def _theirs(q, k, v, sinks, visible, scale):
    """transformers' gpt-oss eager attention with ``module.sinks`` -> (B, H, Lq, D)."""
    module = types.SimpleNamespace(sinks=sinks, num_key_value_groups=1, training=False)
    mask = torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))
    out, _ = gpt_oss.eager_attention_forward(module, q, k, v, mask, scale)
    return out.transpose(1, 2)


@pytest.mark.parametrize("window", [None, Window("sliding", 4)])
@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_sinks_equal_gpt_oss(backend, window):
    torch.manual_seed(0)
    heads, n, dim = 3, 11, 8
    q, k, v = (torch.randn(2, heads, n, dim) for _ in range(3))
    sinks = torch.randn(heads)
    pos = torch.arange(n)
    pe = build_encoding("nope", n_heads=heads, head_dim=dim)
    masks = Masks(window=window, q_pos=pos, k_pos=pos) if window else None
    call = AttentionCall.for_positions(pos, pos, causal=True, backend=backend, masks=masks,
                                       sinks=sinks)
    ours, _ = attend(q, k, v, pe, call)
    visible = torch.ones(n, n, dtype=torch.bool).tril()
    if window is not None:
        visible &= window.visible(pos, pos)[0, 0]
    torch.testing.assert_close(ours, _theirs(q, k, v, sinks, visible, dim ** -0.5),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_sinks_with_a_bias_and_padding_agree_across_backends(backend):
    torch.manual_seed(1)
    pe = build_encoding("alibi", n_heads=2, head_dim=8)
    q, k, v = (torch.randn(2, 2, 9, 8) for _ in range(3))
    pos, sinks = torch.arange(9), torch.randn(2)
    valid = torch.ones(2, 9, dtype=torch.bool)
    valid[1, :3] = False
    masks = Masks(key_valid=valid)

    def run(name):
        call = AttentionCall.for_positions(pos, pos, causal=True, backend=name, masks=masks,
                                           sinks=sinks)
        return attend(q, k, v, pe, call)[0]

    torch.testing.assert_close(run(backend), run("eager"), atol=1e-5, rtol=1e-5)


def test_sink_logits_train_and_lower_the_weights():
    """The sink gets a gradient (sdpa's trainable mask) and the returned weights of each row
    sum to less than 1 (the sink's share)."""
    torch.manual_seed(2)
    attn = MultiHeadAttention(16, 2, sinks=True)
    pe = build_encoding("rope", n_heads=2, head_dim=8)
    x = torch.randn(1, 5, 16)
    ctx = AttentionContext(torch.arange(5), causal=True)
    attn(x, ctx, pe)[0].sum().backward()
    assert attn.sinks.grad is not None and attn.sinks.grad.abs().sum() > 0
    ctx = AttentionContext(torch.arange(5), causal=True, need_weights=True)
    _, weights = attn(x, ctx, pe)
    sums = weights.sum(-1)
    assert (sums < 1).all() and (sums > 0).all()


def test_sinks_are_exact_with_a_windowed_cache():
    torch.manual_seed(3)
    attn = MultiHeadAttention(16, 2, sinks=True, window=Window("sliding", 3)).eval()
    attn.sinks.data.normal_()
    pe = build_encoding("rope", n_heads=2, head_dim=8)
    x = torch.randn(2, 9, 16)
    full, _ = attn(x, AttentionContext(torch.arange(9), causal=True), pe)
    cache = make_caches(1, 2, 2, 8, 9, torch.float32, "cpu", windows=[attn.window])[0]
    parts = []
    for start, end in ((0, 4), (4, 5), (5, 9)):
        ctx = AttentionContext(torch.arange(start, end), causal=True, consecutive=True)
        parts.append(attn(x[:, start:end], ctx, pe, cache)[0])
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)
