"""Region attention as fused passes merged by log-sum-exp (posenc.attention.region_flash):
equal to the explicit scores of region_attention for every method (prefill, a prefill after a
cache prefix, single-token decoding; grouped and plain heads; lengths off the block size),
the fused CPU pass equal to the plain-PyTorch reference, the rectangles of the CPU narrowing
exact, the shape they rely on held by every method, and no value read back off the CPU.

Tolerance: 1e-5 absolute and relative in float32 (both sides softmax the same fp32 scores in
a different order); bfloat16 against float32 references within bfloat16's 2e-2.
"""

from __future__ import annotations

import pytest
import torch

from posenc.attention import region_flash
from posenc.attention.extension_methods import RotaryTable, region_attention
from posenc.attention.region_flash import (
    attention_pass,
    cpu_flash_pass,
    cuda_efficient_pass,
    interval_cover,
    merged_region_attention,
    reference_pass,
)
from posenc.kernels.rotary import frequency_turns
from posenc.methods import Region, build_method
from posenc.methods.self_extend import SelfExtend
from posenc.methods.streaming import StreamingLLM

D = 16
INV_FREQ = 1.0 / (100.0 ** (torch.arange(0, D, 2).float() / D))
TOL = {"atol": 1e-5, "rtol": 1e-5}
NAMES = ["self_extend", "rerope", "leaky_rerope", "dual_chunk", "streaming"]
#: (original, factor, options): defaults at several sizes, and explicit options
BUILDS = [(16, 4.0, {}), (32, 2.5, {}), (64, 3.0, {})]
OPTIONS = {"self_extend": {"window": 5, "group": 3}, "rerope": {"window": 9},
           "leaky_rerope": {"window": 6, "leak": 2.5},
           "dual_chunk": {"chunk_size": 24, "local_window": 5},
           "streaming": {"sinks": 2, "window": 11}}


def _methods():
    out = [(name, build_method(name, o, f, **kw)) for name in NAMES for o, f, kw in BUILDS]
    return out + [(name, build_method(name, 32, 4.0, **OPTIONS[name])) for name in NAMES]


METHODS = _methods()


def _qkv(t, heads=4, kv_heads=2, tq=None, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tq = t if tq is None else tq
    return (torch.randn(2, heads, tq, D, generator=gen).to(dtype),
            torch.randn(2, kv_heads, t, D, generator=gen).to(dtype),
            torch.randn(2, kv_heads, t, D, generator=gen).to(dtype))


@pytest.fixture(scope="module")
def table():
    return RotaryTable(INV_FREQ)


@pytest.mark.parametrize("name,method", METHODS, ids=lambda x: x if isinstance(x, str) else "")
@pytest.mark.parametrize("kv_heads", [2, 4], ids=["gqa", "mha"])
def test_merged_equals_explicit_scores(name, method, kv_heads, table):
    """Prefill of 203 tokens, 72 queries after a cache of 131, and one query after 202
    (decoding), in blocks of 64 and in one block: the merged passes equal the explicit
    scores."""
    t = 203
    q, k, v = _qkv(t, kv_heads=kv_heads)
    pos = torch.arange(t)
    for first in (0, 131, t - 1):
        qq = q[:, :, first:]
        want = region_attention(qq, k, v, method.regions(pos[first:], pos), table, 0.3)
        for block in (64, 256):
            got = merged_region_attention(qq, k, v, pos[first:], pos, method.regions, table,
                                          0.3, block)
            torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("name", NAMES)
def test_reference_pass_equals_the_fused_pass(name, table):
    """The same narrowing and merge with the plain-PyTorch pass instead of the CPU kernel,
    with the default block (one block) and with blocks of 37 queries."""
    method = build_method(name, 16, 6.0)
    q, k, v = _qkv(97)
    pos = torch.arange(97)
    for block in (None, 37):
        fast = merged_region_attention(q, k, v, pos, pos, method.regions, table, 0.3, block)
        ref = merged_region_attention(q, k, v, pos, pos, method.regions, table, 0.3, block,
                                      attend=reference_pass)
        torch.testing.assert_close(fast, ref, **TOL)


def test_blockwise_region_attention_takes_the_merged_path(monkeypatch, table):
    """blockwise_region_attention runs merged_region_attention (the kernel is called), and
    MERGED = False gives the explicit scores back, to the same result."""
    from posenc.attention.extension_methods import blockwise_region_attention
    calls = []

    def spy(*args, **kw):
        calls.append(1)
        return cpu_flash_pass(*args, **kw)
    monkeypatch.setattr(region_flash, "cpu_flash_pass", spy)
    method = build_method("rerope", 16, 4.0)
    q, k, v = _qkv(50)
    pos = torch.arange(50)
    merged = blockwise_region_attention(q, k, v, pos, pos, method.regions, table, 0.3)
    assert calls
    monkeypatch.setattr(region_flash, "MERGED", False)
    calls.clear()
    explicit = blockwise_region_attention(q, k, v, pos, pos, method.regions, table, 0.3)
    assert not calls
    torch.testing.assert_close(merged, explicit, **TOL)


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_follows_float32(name, table):
    method = build_method(name, 16, 4.0)
    q, k, v = _qkv(70, dtype=torch.bfloat16)
    pos = torch.arange(70)
    got = merged_region_attention(q, k, v, pos, pos, method.regions, table, 0.3, block=32)
    want = region_attention(q.float(), k.float(), v.float(), method.regions(pos, pos), table,
                            0.3)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


def test_streaming_with_an_evicting_cache(table):
    """Decoding with StreamingLLM's cache (sinks + window - 1 keys, the rest evicted): one
    query against keys whose positions skip the evicted ones."""
    method = StreamingLLM(3, 9)
    q, k, v = _qkv(11, tq=4)
    evicted = 40
    k_pos = torch.cat((torch.arange(3), torch.arange(3 + evicted, 11 + evicted)))
    q_pos = k_pos[-4:]

    def regions(qp, kp):
        return method.regions(qp, kp, evicted)
    want = region_attention(q, k, v, regions(q_pos, k_pos), table, 0.3)
    got = merged_region_attention(q, k, v, q_pos, k_pos, regions, table, 0.3)
    torch.testing.assert_close(got, want, **TOL)


# ------------------------------------------------------------ the passes and their routing
@pytest.mark.parametrize("kind", ["none", "mask", "causal"])
def test_cpu_flash_pass_equals_the_reference(kind):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 21, D, generator=gen)
    k, v = torch.randn(2, 4, 33, D, generator=gen), torch.randn(2, 4, 33, D, generator=gen)
    mask = (torch.rand(21, 33, generator=gen) > 0.4) if kind == "mask" else None
    if mask is not None:
        mask[:, 0] = True                                 # no empty row: the kernel's lse is 0
    out, lse = cpu_flash_pass(q, k, v, mask, kind == "causal", 0.3)
    ref_out, ref_lse = reference_pass(q, k, v, mask, kind == "causal", 0.3)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(lse, ref_lse, **TOL)


def test_reference_pass_gives_an_empty_row_nothing():
    q, k, v = _qkv(6, kv_heads=4)
    mask = torch.ones(6, 6, dtype=torch.bool)
    mask[2] = False
    out, lse = reference_pass(q, k, v, mask, False, 0.3)
    assert torch.isinf(lse[:, :, 2]).all() and (out[:, :, 2] == 0).all()
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("device,dtype,head_dim,expected", [
    ("cpu", torch.float32, 16, cpu_flash_pass), ("cpu", torch.bfloat16, 12, cpu_flash_pass),
    ("cuda", torch.float32, 64, cuda_efficient_pass),
    ("cuda:1", torch.bfloat16, 128, cuda_efficient_pass),
    ("cuda", torch.float64, 64, reference_pass), ("cuda", torch.float16, 12, reference_pass),
    ("mps", torch.float32, 64, reference_pass), ("meta", torch.float32, 64, reference_pass)])
def test_pass_routing_by_device_type(device, dtype, head_dim, expected):
    assert attention_pass(torch.device(device), dtype, head_dim) is expected


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("attend", [None, cuda_efficient_pass], ids=["routed", "cuda-pass"])
def test_no_value_is_read_back_off_the_cpu(name, attend):
    """On the meta device a tensor has no data, so any read back to the host raises: a
    prefill in blocks, a prefill after a cache and a decoding step run there whole, through
    the pass routing picks (the reference) and through the CUDA pass's own code."""
    method = build_method(name, 16, 4.0)
    pos = torch.arange(45, device="meta")
    scales = {r.scale for r in method.regions(torch.arange(45), torch.arange(45))}
    turns = {s: tuple(t.to("meta") for t in frequency_turns(INV_FREQ * s)) for s in scales}
    table = RotaryTable(INV_FREQ.to("meta"), turns=turns)
    q, k, v = (t.to("meta") for t in _qkv(45))
    for first in (0, 20, 44):
        out = merged_region_attention(q[:, :, first:], k, v, pos[first:], pos,
                                      method.regions, table, 0.3, block=16, attend=attend)
        assert out.shape == (2, 4, 45 - first, D) and out.device.type == "meta"


# ------------------------------------------------------------ rows no pair covers, odd shapes
def test_a_query_without_pairs_gets_zeros_not_nan(table):
    """A region set that leaves queries 3 and 4 without any key: their rows are 0 (on the
    narrowed CPU path and the masked path of an accelerator), the others as explicit."""
    def regions(qp, kp):
        d = qp[:, None] - kp[None, :]
        hole = ((qp == 3) | (qp == 4))[:, None]
        return [Region("near", (d >= 0) & (d < 4) & ~hole, qp, kp),
                Region("far", (d >= 4) & ~hole, qp // 2, kp // 2)]
    q, k, v = _qkv(30)
    pos = torch.arange(30)
    got = merged_region_attention(q, k, v, pos, pos, regions, table, 0.3, block=8)
    masked = merged_region_attention(q, k, v, pos, pos, regions, table, 0.3, block=8,
                                     attend=reference_pass)
    want = region_attention(q, k, v, regions(pos, pos), table, 0.3)       # NaN rows 3, 4
    keep = torch.ones(30, dtype=torch.bool)
    keep[3:5] = False
    for out in (got, masked):
        assert torch.isfinite(out).all() and (out[:, :, 3:5] == 0).all()
        torch.testing.assert_close(out[:, :, keep], want[:, :, keep], **TOL)


def test_regions_of_any_shape_are_read_whole(table):
    """Regions whose queries see several runs of keys (every other key) do not have the shape
    the narrowing relies on: they are read whole, to the explicit result."""
    def regions(qp, kp):
        d = qp[:, None] - kp[None, :]
        even = (kp % 2 == 0)[None, :]
        return [Region("even", (d >= 0) & even, qp, kp),
                Region("odd", (d >= 0) & ~even, qp // 3, kp // 3)]
    q, k, v = _qkv(77)
    pos = torch.arange(77)
    got = merged_region_attention(q, k, v, pos, pos, regions, table, 0.3, block=32)
    torch.testing.assert_close(got, region_attention(q, k, v, regions(pos, pos), table, 0.3),
                               **TOL)


# ------------------------------------------------------------ the CPU narrowing
@pytest.mark.parametrize("seed", range(6))
def test_interval_cover_covers_each_pair_once(seed):
    """Rectangles from rising runs [f_i, l_i]: every pair of a run exactly once, nothing
    else; a causal rectangle counts key c - c0 <= row r - r0."""
    gen = torch.Generator().manual_seed(seed)
    n = 150
    f = torch.randint(0, 3, (n,), generator=gen).cumsum(0)
    l = torch.maximum(f + torch.randint(0, 40, (n,), generator=gen),
                      torch.randint(0, 3, (n,), generator=gen).cumsum(0) + 20).cummax(0)[0]
    keys = torch.arange(int(l.max()) + 1)
    count = torch.zeros(n, keys.numel(), dtype=torch.int)
    for r0, r1, c0, c1, kind, mask in interval_cover(f.tolist(), l.tolist()):
        rows, cols = torch.arange(r0, r1)[:, None], torch.arange(c0, c1)[None, :]
        if kind == "full":
            cell = torch.ones(r1 - r0, c1 - c0, dtype=torch.bool)
        elif kind == "causal":
            cell = (cols - c0) <= (rows - r0)
        else:
            cell = mask
        count[r0:r1, c0:c1] += cell.int()
    runs = (keys >= f[:, None]) & (keys <= l[:, None])
    assert torch.equal(count, runs.int())


@pytest.mark.parametrize("name,method", METHODS, ids=lambda x: x if isinstance(x, str) else "")
def test_every_method_has_rising_runs(name, method):
    """What the CPU narrowing relies on: in every region, each query sees one run of keys,
    the queries that see any are consecutive, and the runs' first and last keys do not
    decrease from one query to the next (prefill, and queries after a cache)."""
    pos = torch.arange(160)
    for first in (0, 97):
        for region in method.regions(pos[first:], pos):
            mask = region.mask
            seen = mask.any(1).nonzero().flatten()
            if seen.numel() == 0:
                continue
            assert seen[-1] - seen[0] + 1 == seen.numel(), region.name
            rows = mask[seen]
            f = rows.int().argmax(1)
            l = mask.shape[1] - 1 - rows.flip(1).int().argmax(1)
            keys = torch.arange(mask.shape[1])
            assert torch.equal(rows, (keys >= f[:, None]) & (keys <= l[:, None])), region.name
            assert (f.diff() >= 0).all() and (l.diff() >= 0).all(), region.name


def test_the_narrowing_reads_blocks_not_the_whole_mask(monkeypatch, table):
    """A long prefill evaluates the regions on few (query, key) pairs: the first and last
    queries of each block against all keys, and each block's queries against the keys between
    its first and last query's run ends, never a block against all its keys."""
    method = SelfExtend(8, 4)
    evaluated = []

    def regions(qp, kp):
        evaluated.append(qp.numel() * kp.numel())
        return method.regions(qp, kp)
    q, k, v = _qkv(1200, heads=2, kv_heads=1)
    pos = torch.arange(1200)
    merged_region_attention(q, k, v, pos, pos, regions, table, 0.3, block=100)
    blocks = sum(100 * end for end in range(100, 1201, 100))   # each block x its keys
    assert sum(evaluated) < 0.25 * blocks
    assert max(evaluated) <= 100 * 2 * 100 + 2 * 1200


def test_a_method_that_declares_no_rising_runs_is_read_whole_to_the_same_result():
    """A method that does not declare rising runs (a plug-in whose regions may have holes) is
    attended with every region read whole, to the explicit scores' result."""
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 2, 40, D), torch.randn(1, 2, 40, D), torch.randn(1, 2, 40, D)
    pos = torch.arange(40)
    rotate = RotaryTable(INV_FREQ)

    def holes(qp, kp):
        d = qp[:, None] - kp[None, :]
        hole = (d >= 0) & (d != 7) & (d != 8)                  # every query skips two keys
        return [Region("holes", hole, qp, kp)]
    want = region_attention(q, k, v, holes(pos, pos), rotate, D ** -0.5)
    got = merged_region_attention(q, k, v, pos, pos, holes, rotate, D ** -0.5, block=16,
                                  rising_runs=False)
    torch.testing.assert_close(got, want, **TOL)
