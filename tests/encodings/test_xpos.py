"""xPos: q.k depends only on m - n and decays with distance; the RoPE limit; overflow checks;
cached decoding; sdpa = eager; options. (flex = eager: tests/attention/test_backends.py
covers every encoding on one compiled shape.)"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.encodings.context import HookContext
from posenc.encodings.xpos import xpos_zeta

H, D = 2, 8
V = 48


def _pe(name="xpos", **options):
    return build_encoding(name, n_heads=H, head_dim=D, max_len=64, **options)


def _scores(pe, q, k, m, n):
    """q.k with q at positions m (Lq,) and k at n (Lk,): (B, H, Lq, Lk)."""
    qt, _ = pe.transform_qk(q, q, HookContext.for_positions(m, m))
    _, kt = pe.transform_qk(k, k, HookContext.for_positions(n, n))
    return qt @ kt.transpose(-2, -1)


def test_zeta_formula():
    assert_close(xpos_zeta(8), torch.tensor([0, 2, 4, 6]).float().div(8).add(0.4).div(1.4))
    assert_close(xpos_zeta(8, gamma=1.0)[0], torch.tensor(0.5))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_distance(layout):
    pe = _pe(scale_base=8.0, layout=layout)                   # strong decay, visible effects
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, H, 4, D, generator=gen), torch.randn(1, H, 6, D, generator=gen)
    m, n = torch.arange(10, 14), torch.arange(3, 9)
    ref = _scores(pe, q, k, m, n)
    for shift in (-3, 25, 200):
        assert_close(_scores(pe, q, k, m + shift, n + shift), ref, atol=1e-5, rtol=1e-4)
    other_center = _pe(scale_base=8.0, layout=layout, center=-40)
    assert_close(_scores(other_center, q, k, m, n), ref, atol=1e-5, rtol=1e-4)
    assert (ref - _scores(_pe("rope", layout=layout), q, k, m, n)).abs().max() > 1e-2


def test_decay_with_distance():
    """Each rotated pair's |q_m||k_n| is |q||k| * zeta_i^((m - n)/scale_base): it shrinks as
    the key moves away from the query."""
    base = 16.0
    pe = _pe(scale_base=base)
    q = k = torch.ones(1, 1, 1, D)
    m = torch.tensor([20])
    zeta = xpos_zeta(D)
    prev = None
    for dist in range(0, 20, 4):
        qt, _ = pe.transform_qk(q, q, HookContext.for_positions(m, m))
        _, kt = pe.transform_qk(k, k, HookContext.for_positions(m - dist, m - dist))
        pair = lambda x: torch.stack((x[..., :D // 2], x[..., D // 2:]), -1).norm(dim=-1)
        got = (pair(qt) * pair(kt))[0, 0, 0]                  # (D/2,)
        assert_close(got, 2 * zeta ** (dist / base))
        if prev is not None:
            assert (got < prev).all()
        prev = got


def test_large_scale_base_is_rope():
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, H, 5, D, generator=gen), torch.randn(2, H, 5, D, generator=gen)
    pos = torch.arange(5) + 7
    got = _pe(scale_base=1e9).transform_qk(q, k, HookContext.for_positions(pos, pos))
    want = _pe("rope").transform_qk(q, k, HookContext.for_positions(pos, pos))
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


def test_far_positions_stay_finite_and_overflow_is_an_error():
    pe = _pe(center=0)                                        # scale_base 512
    gen = torch.Generator().manual_seed(4)
    q, k = torch.randn(1, H, 1, D, generator=gen), torch.randn(1, H, 1, D, generator=gen)
    far = _scores(pe, q, k, torch.tensor([30_010]), torch.tensor([30_000]))
    near = _scores(pe, q, k, torch.tensor([10]), torch.tensor([0]))
    assert torch.isfinite(far).all()
    assert_close(far, near, atol=1e-4, rtol=1e-3)
    with pytest.raises(ValueError, match="center"):
        pe.transform_qk(q, k,
                        HookContext.for_positions(torch.tensor([40_000]), torch.tensor([40_000])))
    with pytest.raises(ValueError, match="float16"):
        pe.transform_qk(q.half(), k.half(),
                        HookContext.for_positions(torch.tensor([3_000]), torch.tensor([3_000])))
    # a centre near the positions serves them
    shifted = _pe(center=40_000)
    far = HookContext.for_positions(torch.tensor([40_000]))
    assert torch.isfinite(shifted.transform_qk(q, k, far)[0]).all()


def test_default_center_is_half_max_len():
    assert _pe().center == 32
    assert build_encoding("xpos", n_heads=H, head_dim=D).center == 0


@pytest.mark.parametrize("options,match", [
    ({"scale_base": 0.0}, "scale_base"), ({"gamma": -0.4}, "gamma"),
    ({"center": 1.5}, "center must be an integer"), ({"rotary_dim": 3}, "rotary_dim"),
    ({"layout": "zigzag"}, "layout")])
def test_options(options, match):
    with pytest.raises(ValueError, match=match):
        _pe(**options)


def _check_decoding(model, ids, prefill):
    """Prefill, then one token at a time; each chunk equals a recompute of its prefix (with
    dynamic NTK the frequencies depend on the length seen so far, so the prefix recompute,
    not one pass over all tokens, is the reference)."""
    caches = model.make_caches(ids.shape[0], ids.shape[1])
    bounds = [(0, prefill)] + [(i, i + 1) for i in range(prefill, ids.shape[1])]
    for start, end in bounds:
        got = model(ids[:, start:end], caches=caches)
        assert_close(got, model(ids[:, :end])[:, start:end], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options,n_layers", [
    ({"scale_base": 8.0}, 2), ({"rotary_dim": 4, "center": 3}, 2),
    # raw keys cached and re-transformed; one layer, since with more, dynamic NTK's earlier
    # hidden states (computed at shorter lengths) differ from a recompute, as for plain RoPE
    ({"scaling": {"rope_type": "dynamic", "factor": 2.0}}, 1)], ids=str)
def test_model_cached_decoding_and_backends(options, n_layers, tiny_lm):
    model = tiny_lm("xpos", options, max_len=8, n_layers=n_layers)
    ids = torch.randint(0, V, (2, 14))
    with torch.no_grad():
        full = model(ids, backend="eager")
        assert_close(model(ids, backend="sdpa"), full, atol=1e-5, rtol=1e-5)
        _check_decoding(model, ids, prefill=5)
