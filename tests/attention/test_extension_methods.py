"""Region-remapped RoPE attention (Self-Extend, ReRoPE, Leaky ReRoPE, Dual Chunk, StreamingLLM):
hand-computed position maps, region attention against a per-pair loop, cached decoding against
a full forward, and StreamingLLM against a direct implementation of the paper's algorithm."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.attention.extension_methods import (
    RotaryTable,
    blockwise_region_attention,
    reads_spans,
    region_attention,
)
from posenc.kernels.rotary import apply_rotary, frequency_turns, rotary_angles
from posenc.methods import relative_positions
from posenc.methods.dual_chunk import DualChunk
from posenc.methods.leaky_rerope import LeakyReRoPE
from posenc.methods.rerope import ReRoPE
from posenc.methods.self_extend import SelfExtend
from posenc.methods.streaming import StreamingLLM

NAN = float("nan")
D = 8
INV_FREQ = 1.0 / (100.0 ** (torch.arange(0, D, 2).float() / D))


def rotate(x, pos, scale=1.0):
    angles = rotary_angles(pos.float() * scale, INV_FREQ)
    return apply_rotary(x, angles.cos(), angles.sin())


# ------------------------------------------------------------ attention
METHODS = [SelfExtend(4, 3), ReRoPE(5), LeakyReRoPE(5, leak=3.0), DualChunk(7, 2),
           StreamingLLM(2, 5)]


def _qkv(t=23, heads=4, kv_heads=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(2, heads, t, D, generator=gen), torch.randn(2, kv_heads, t, D,
                                                                    generator=gen),
            torch.randn(2, kv_heads, t, D, generator=gen))


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_region_attention_equals_a_per_pair_loop(method):
    """Score of (i, j) = rotate(q_i, rel_ij) . k_j with rel from the position map."""
    q, k, v = _qkv(t=12)
    pos = torch.arange(12)
    out = region_attention(q, k, v, method.regions(pos, pos), rotate, 0.5)
    rel = relative_positions(method, pos, pos)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    ref = torch.zeros_like(q)
    for i in range(12):
        seen = [j for j in range(12) if not math.isnan(rel[i, j])]
        rq = torch.stack([rotate(q[:, :, i:i + 1], rel[i, j:j + 1])[:, :, 0] for j in seen],
                         2)                                           # (B, H, n, D)
        w = ((rq * kk[:, :, seen]).sum(-1) * 0.5).softmax(-1)
        ref[:, :, i] = (w[..., None] * vv[:, :, seen]).sum(2)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_blockwise_decoding_equals_full_forward(method):
    """A prefix, then one query at a time against all keys so far == the full forward."""
    q, k, v = _qkv()
    pos = torch.arange(23)
    full = region_attention(q, k, v, method.regions(pos, pos), rotate, 0.3)
    steps = [region_attention(q[:, :, :9], k[:, :, :9], v[:, :, :9],
                              method.regions(pos[:9], pos[:9]), rotate, 0.3)]
    for t in range(9, 23):
        steps.append(region_attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1],
                                      method.regions(pos[t:t + 1], pos[:t + 1]), rotate, 0.3))
    torch.testing.assert_close(torch.cat(steps, 2), full, atol=1e-5, rtol=1e-5)


def _streaming_by_the_paper(q, k, v, sinks, window, scale):
    """Xiao et al.'s loop: append raw k, v; evict beyond sinks + window (the middle); give the
    cached keys positions 0..n-1 and the query the last one; rotate; attend."""
    cache_k, cache_v, outs = [], [], []
    group = q.shape[1] // k.shape[1]
    for t in range(q.shape[2]):
        cache_k.append(k[:, :, t])
        cache_v.append(v[:, :, t])
        if len(cache_k) > sinks + window:
            del cache_k[sinks], cache_v[sinks]
        kk = torch.stack(cache_k, 2).repeat_interleave(group, 1)
        vv = torch.stack(cache_v, 2).repeat_interleave(group, 1)
        n = kk.shape[2]
        kr = rotate(kk, torch.arange(n))
        qr = rotate(q[:, :, t:t + 1], torch.tensor([n - 1]))
        w = ((qr @ kr.transpose(-1, -2)) * scale).softmax(-1)
        outs.append(w @ vv)
    return torch.cat(outs, 2)


def test_streaming_equals_the_papers_algorithm():
    q, k, v = _qkv(t=30)
    method = StreamingLLM(3, 6)
    ref = _streaming_by_the_paper(q, k, v, 3, 6, 0.4)
    pos = torch.arange(30)
    full = region_attention(q, k, v, method.regions(pos, pos), rotate, 0.4)
    torch.testing.assert_close(full, ref, atol=1e-5, rtol=1e-5)
    # decoding with an evicting cache: only sinks + window - 1 keys stay between steps
    ck, cv, evicted, outs = k[:, :, :0], v[:, :, :0], 0, []
    for t in range(30):
        ck, cv = torch.cat((ck, k[:, :, t:t + 1]), 2), torch.cat((cv, v[:, :, t:t + 1]), 2)
        kpos = torch.cat((torch.arange(min(3, ck.shape[2])),
                          torch.arange(min(3, t + 1) + evicted, t + 1)))[:ck.shape[2]]
        outs.append(region_attention(q[:, :, t:t + 1], ck, cv,
                                     method.regions(pos[t:t + 1], kpos, evicted), rotate, 0.4))
        keep = method.kept(ck.shape[2])
        evicted += ck.shape[2] - keep.numel()
        ck, cv = ck[:, :, keep], cv[:, :, keep]
        assert ck.shape[2] <= 3 + 6 - 1
    torch.testing.assert_close(torch.cat(outs, 2), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_blockwise_prefill_equals_one_block(method):
    """Queries in blocks of 5 (each against the keys up to its last query) == all at once,
    for a prefill and for queries that continue a cache of 4 keys."""
    q, k, v = _qkv()
    pos = torch.arange(23)
    for first in (0, 4):
        whole = region_attention(q[:, :, first:], k, v, method.regions(pos[first:], pos),
                                 rotate, 0.3)
        blocks = blockwise_region_attention(q[:, :, first:], k, v, pos[first:], pos,
                                            method.regions, rotate, 0.3, block=5)
        torch.testing.assert_close(blocks, whole, atol=1e-6, rtol=1e-6)


def test_blocks_bound_the_scores_of_a_long_prefill(monkeypatch):
    """By default a block holds at most SCORE_BUDGET scores (batch x heads x queries x keys)
    on the explicit-scores path."""
    import posenc.attention.extension_methods as em
    import posenc.attention.region_flash as region_flash
    monkeypatch.setattr(region_flash, "MERGED", False)
    seen = []
    inner = em.region_attention

    def spy(q, k, v, *rest):
        seen.append(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2])
        return inner(q, k, v, *rest)
    monkeypatch.setattr(em, "SCORE_BUDGET", 2 * 4 * 16 * 23)    # 16 queries of 23 keys
    monkeypatch.setattr(em, "region_attention", spy)
    q, k, v = _qkv()
    pos = torch.arange(23)
    out = em.blockwise_region_attention(q, k, v, pos, pos, SelfExtend(4, 3).regions, rotate,
                                        0.3)
    assert len(seen) == 2 and max(seen) <= em.SCORE_BUDGET
    torch.testing.assert_close(out, inner(q, k, v, SelfExtend(4, 3).regions(pos, pos),
                                          rotate, 0.3), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("device,reads", [("cpu", True), ("cuda", False), ("cuda:1", False),
                                          ("mps", False), ("meta", False)])
def test_only_a_cpu_reads_region_spans_back(device, reads):
    assert reads_spans(torch.device(device)) is reads


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_scoring_every_key_gives_what_the_spans_give(method, monkeypatch):
    """Without reads back to the host (as on an accelerator: every region scores all keys
    under its mask, rotary angles computed instead of looked up), prefill, blocks and decoding
    equal the CPU's narrowed computation."""
    import posenc.attention.extension_methods as em
    q, k, v = _qkv()
    pos = torch.arange(23)
    table = RotaryTable(INV_FREQ)

    def outputs():
        prefill = blockwise_region_attention(q, k, v, pos, pos, method.regions, table, 0.3,
                                             block=5)
        step = region_attention(q[:, :, -1:], k, v, method.regions(pos[-1:], pos), table, 0.3)
        return prefill, step
    narrowed = outputs()
    monkeypatch.setattr(em, "reads_spans", lambda device: False)
    for got, want in zip(outputs(), narrowed):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_region_attention_never_reads_a_value_on_an_accelerator(method):
    """On the meta device a tensor has no data, so any read back to the host raises: a
    prefill in blocks and a decoding step run there whole."""
    q, k, v = (t.to("meta") for t in _qkv())
    pos = torch.arange(23, device="meta")
    scales = {r.scale for r in method.regions(torch.arange(23), torch.arange(23))}
    turns = {s: tuple(t.to("meta") for t in frequency_turns(INV_FREQ * s))    # made once,
             for s in scales}                                                 # up front
    table = RotaryTable(INV_FREQ.to("meta"), turns=turns)
    prefill = blockwise_region_attention(q, k, v, pos, pos, method.regions, table, 0.3,
                                         block=5)
    step = region_attention(q[:, :, -1:], k, v, method.regions(pos[-1:], pos), table, 0.3)
    assert prefill.shape == q.shape and step.shape == (2, 4, 1, D)
