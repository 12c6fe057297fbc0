"""The KV cache: a positive capacity, a sequence past it refused with nothing half-written,
the encoding terms it keeps, and the rolling cache's terms and padding."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.attention import KVCache, WindowedKVCache
from posenc.attention.masks import Window
from posenc.encodings import PositionalEncoding

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("options", [{}, {"scaling": {"rope_type": "dynamic", "factor": 2.0}}])
@torch.no_grad()
def test_sequence_past_the_cache_size(options):
    model = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=2,
                                   max_len=4, pe="rope", pe_options=options)).eval()
    ids = torch.randint(0, 16, (1, 8))
    caches = model.make_caches(1, 8)
    model(ids[:, :6], caches=caches)
    with pytest.raises(ValueError, match=r"sequence length 9 exceeds the KV cache size 8; "
                                         r"valid lengths are 1..8"):
        model(ids[:, :3], caches=caches)
    assert all(c.length == 6 for c in caches)                 # nothing was half-written
    torch.testing.assert_close(model(ids[:, 6:], caches=caches), model(ids)[:, 6:])


def test_cache_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        KVCache(1, 2, 4, 0)


class _TermsSpy(PositionalEncoding):
    """Reads its input (the first feature per head) and records the key terms it is told."""

    seen: list

    def token_terms(self, x):
        return x.unflatten(-1, (self.n_heads, -1))[..., :1].transpose(1, 2)   # (B, H, T, 1)

    def score_bias(self, q, k, at):
        self.seen.append(at.key_terms)
        return None


@torch.no_grad()
def test_token_terms_of_cached_keys_are_kept_with_the_cache():
    """Self-attention hands the hooks the terms of every key, cached ones first, in cached
    decoding as in one pass; cross-attention hands none."""
    from posenc.attention import AttentionContext, MultiHeadAttention
    pe = _TermsSpy(n_heads=2, head_dim=4)
    pe.seen = []
    attn = MultiHeadAttention(8, 2)
    x = torch.randn(2, 6, 8)
    attn(x, AttentionContext(torch.arange(6), causal=True), pe)
    full = pe.seen.pop()
    assert full.shape == (2, 2, 6, 1)
    torch.testing.assert_close(full[..., 0], x[..., ::4].transpose(1, 2))
    cache = KVCache(2, 2, 4, 6)
    attn(x[:, :4], AttentionContext(torch.arange(4), causal=True), pe, cache)
    for t in (4, 5):
        attn(x[:, t:t + 1], AttentionContext(torch.arange(t, t + 1), causal=True), pe, cache)
    assert [s.shape[2] for s in pe.seen] == [4, 5, 6]
    torch.testing.assert_close(pe.seen[-1], full)
    cross = MultiHeadAttention(8, 2, cross=True)
    cross(x, AttentionContext(torch.arange(6), causal=False, memory=x,
                              memory_pos=torch.arange(6)), pe)
    assert pe.seen[-1] is None


@pytest.mark.parametrize("window", [Window("sliding", 3), Window("chunked", 3)])
def test_windowed_cache_rolls_terms_and_padding_with_its_keys(window):
    """The terms and the padding mask a rolling cache returns are those of the keys it
    returns (the last ones of a full cache), padded appends after unpadded ones included."""
    gen = torch.Generator().manual_seed(0)
    cache, full = WindowedKVCache(2, 2, 4, 20, window), KVCache(2, 2, 4, 20)
    for t, padded in ((4, False), (1, False), (2, True), (1, False), (3, True)):
        k, v, terms = (torch.randn(2, 2, t, n, generator=gen) for n in (4, 4, 1))
        pos = torch.arange(full.length, full.length + t)
        valid = torch.rand(2, t, generator=gen) > 0.3 if padded else None
        wk, _, wpos = cache.append(k, v, pos, valid)
        full.append(k, v, pos, valid)
        n = wk.shape[2]
        torch.testing.assert_close(cache.append_terms(terms), full.append_terms(terms)[:, :, -n:],
                                   atol=0, rtol=0)
        assert torch.equal(wpos, full.positions()[-n:])
        assert (cache.valid() is None) == (full.valid() is None)
        if full.valid() is not None:
            assert torch.equal(cache.valid(), full.valid()[:, -n:])
    assert cache.terms.shape[2] == window.keep
