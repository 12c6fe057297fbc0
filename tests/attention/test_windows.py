"""Attention windows (sliding, chunked): masks against Hugging Face's mask functions, every
backend against eager, and the rolling KV cache."""

import pytest
import torch

from posenc.attention import AttentionCall, attend
from posenc.attention.cache import KVCache, WindowedKVCache, make_caches
from posenc.attention.masks import Masks, Window
from posenc.encodings import build_encoding
from posenc.errors import UserError
from posenc.models.positions import positions_from_mask

masking_utils = pytest.importorskip("transformers.masking_utils")


def _hf_visible(mask_function, batch: int, lq: int, lk: int) -> torch.Tensor:
    """(B, 1, Lq, Lk) bool from a transformers mask function of (b, h, q_idx, kv_idx)."""
    b = torch.arange(batch)[:, None, None, None]
    q = torch.arange(lk - lq, lk)[None, None, :, None]
    kv = torch.arange(lk)[None, None, None, :]
    return mask_function(b, 0, q, kv).expand(batch, 1, lq, lk)


@pytest.mark.parametrize("n,size", [(7, 3), (12, 4), (9, 1), (16, 16)])
def test_sliding_window_equals_transformers(n, size):
    pos = torch.arange(n)
    ours = Masks(window=Window("sliding", size), q_pos=pos, k_pos=pos).visibility(
        n, n, "cpu", causal=True)
    theirs = _hf_visible(masking_utils.sliding_window_causal_mask_function(size), 1, n, n)
    assert torch.equal(ours.expand_as(theirs), theirs)


@pytest.mark.parametrize("n,size", [(7, 3), (12, 4), (10, 5), (8, 1)])
def test_chunked_window_equals_transformers_with_left_padding(n, size):
    """Llama 4's chunked mask (transformers' chunked_causal_mask_function, whose chunks start
    at each row's first real token) on a left-padded batch, with the positions a model
    builds: equal on every pair of real tokens."""
    pads = torch.tensor([0, 2, 3])
    valid = torch.arange(n)[None, :] >= pads[:, None]                   # (B, n)
    pos = positions_from_mask(valid, torch.zeros(3, dtype=torch.long))
    ours = Masks(window=Window("chunked", size), q_pos=pos, k_pos=pos).visibility(
        n, n, "cpu", causal=True)
    theirs = _hf_visible(masking_utils.chunked_causal_mask_function(size, pads), 3, n, n)
    real = valid[:, None, :, None] & valid[:, None, None, :]
    assert torch.equal(ours & real, theirs & real)


def test_window_checks_its_arguments():
    with pytest.raises(UserError, match="window must be an integer >= 1"):
        Window("sliding", 0)
    with pytest.raises(UserError, match="window_kind must be one of sliding, chunked"):
        Window("dilated", 4)
    with pytest.raises(UserError, match="needs the positions"):
        Masks(window=Window("sliding", 2))
    with pytest.raises(UserError, match="^window must be at most max_len=8 tokens, got 9$"):
        Window.declare(9, "chunked", max_len=8)
    assert Window.declare(8, max_len=8) == Window("sliding", 8)


@pytest.mark.parametrize("window", [Window("sliding", 3), Window("chunked", 4)])
def test_the_window_rule_by_hand(window):
    """Query position 9: sliding 3 sees keys 7..9 (and later ones, which the causal mask
    hides); chunked 4 sees its chunk 8..11."""
    keys = torch.arange(14)
    seen = keys[window.pair_visible(torch.tensor(9), keys)].tolist()
    assert seen == ([7, 8, 9, 10, 11, 12, 13] if window.kind == "sliding" else [8, 9, 10, 11])


@pytest.mark.parametrize("window", [Window("sliding", 1), Window("sliding", 5),
                                    Window("chunked", 1), Window("chunked", 4)])
def test_may_see_is_exactly_whether_some_pair_of_two_runs_is_in_the_window(window):
    """For runs of consecutive positions, the block test from the rule's bounds equals
    the rule applied to every pair of the two runs."""
    runs = [(lo, lo + width) for lo in range(0, 16, 3) for width in (0, 1, 4)]
    lo, hi = (torch.tensor([r[i] for r in runs]) for i in (0, 1))
    expected = torch.tensor([[bool(window.pair_visible(torch.arange(ql, qh + 1)[:, None],
                                                       torch.arange(kl, kh + 1)[None]).any())
                              for kl, kh in runs] for ql, qh in runs])
    assert torch.equal(window.may_see(lo, hi, lo, hi), expected)


def _flex_visible(block_mask, batch: int, lq: int, lk: int) -> torch.Tensor:
    """(B, Lq, Lk) bool: the pairs FlexAttention attends under ``block_mask``: the mask_mod
    inside its partial blocks, everything inside its full blocks, nothing elsewhere."""
    from torch.nn.attention.flex_attention import _ordered_to_dense, create_mask
    size = block_mask.BLOCK_SIZE

    def cells(count, index):
        if count is None:
            return torch.zeros(batch, lq, lk, dtype=torch.bool)
        dense = _ordered_to_dense(count, index, index.shape[-1]).bool()[:, 0]   # (B|1, nq, nk)
        dense = dense.repeat_interleave(size[0], 1).repeat_interleave(size[1], 2)
        return dense[:, :lq, :lk].expand(batch, lq, lk)

    mod = create_mask(block_mask.mask_mod, batch, 1, lq, lk, device="cpu")[:, 0]
    return (cells(block_mask.kv_num_blocks, block_mask.kv_indices) & mod) | \
        cells(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)


@pytest.mark.parametrize("window", [Window("sliding", 1), Window("sliding", 50),
                                    Window("sliding", 200), Window("chunked", 7),
                                    Window("chunked", 64), Window("chunked", 130)])
@pytest.mark.parametrize("shared", [True, False])
def test_dense_mask_and_flex_block_mask_see_the_same_pairs(window, shared):
    """One rule, two paths: the dense mask (sdpa, eager, fused) and FlexAttention's block
    mask with its mask_mod give the same pairs, for positions with gaps shared by the
    batch (the block mask then skips blocks by :meth:`Window.may_see`) and per row."""
    from posenc.attention.backends import _masked_block_mask
    gen = torch.Generator().manual_seed(3)
    n = 300
    steps = torch.randint(1, 3, (1 if shared else 2, n), generator=gen)
    pos = (steps.cumsum(-1) - steps[:, :1])[0] if shared else steps.cumsum(-1) - steps[:, :1]
    masks = Masks(window=window, q_pos=pos, k_pos=pos)
    dense = masks.visibility(n, n, "cpu", causal=True)[:, 0].expand(2, n, n)     # (B, n, n)
    flex = _flex_visible(_masked_block_mask(n, n, "cpu", True, masks), 2, n, n)
    assert torch.equal(flex, dense)
    q = pos if shared else pos[0]
    by_rule = window.pair_visible(q[:, None], q[None, :]) & torch.ones(n, n).tril().bool()
    assert torch.equal(dense[0], by_rule)


def _call(q_pos, k_pos, window, backend, key_valid=None, sinks=None):
    masks = Masks(key_valid=key_valid, window=window, q_pos=q_pos, k_pos=k_pos)
    return AttentionCall.for_positions(q_pos, k_pos, causal=True, backend=backend,
                                       masks=masks, sinks=sinks)


@pytest.mark.parametrize("pe_name", ["rope", "alibi"])
@pytest.mark.parametrize("window", [Window("sliding", 3), Window("chunked", 4)])
def test_backends_agree_with_a_window(pe_name, window):
    torch.manual_seed(0)
    pe = build_encoding(pe_name, n_heads=2, head_dim=8, max_len=64)
    q, k, v = (torch.randn(2, 2, 10, 8) for _ in range(3))
    pos = torch.arange(10)
    eager, _ = attend(q, k, v, pe, _call(pos, pos, window, "eager"))
    for backend in ("sdpa", "flex"):
        out, _ = attend(q, k, v, pe, _call(pos, pos, window, backend))
        torch.testing.assert_close(out, eager, atol=1e-5, rtol=1e-5)
    # by hand: the last query of a sliding window of 3 reads keys 7..9 only
    if window.kind == "sliding" and pe_name == "rope":
        w = (q[:, :, -1:] @ k[:, :, 7:].transpose(-1, -2) * pe.sm_scale()).softmax(-1)
        torch.testing.assert_close(eager[:, :, -1:], w @ v[:, :, 7:], atol=1e-5, rtol=1e-5)


def test_fused_training_path_sees_the_window():
    """fp32 training on the CPU routes a biased encoding to the fused attention; it must
    apply the window like eager, gradients included."""
    torch.manual_seed(1)
    pe = build_encoding("alibi", n_heads=2, head_dim=8, max_len=64)
    pos, window = torch.arange(9), Window("sliding", 2)
    grads = []
    outs = []
    for backend in ("sdpa", "eager"):
        q = torch.randn(1, 2, 9, 8, generator=torch.Generator().manual_seed(2),
                        requires_grad=True)
        k, v = (torch.randn(1, 2, 9, 8, generator=torch.Generator().manual_seed(s))
                for s in (3, 4))
        out, _ = attend(q, k, v, pe, _call(pos, pos, window, backend))
        out.sum().backward()
        outs.append(out.detach())
        grads.append(q.grad)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [Window("sliding", 3), Window("chunked", 3)])
def test_windowed_cache_keeps_what_the_window_sees(window):
    torch.manual_seed(0)
    cache = WindowedKVCache(2, 1, 4, 20, window)
    full = KVCache(2, 1, 4, 20)
    for t in (4, 1, 1, 3):
        k, v = torch.randn(2, 1, t, 4), torch.randn(2, 1, t, 4)
        pos = torch.arange(full.length, full.length + t)
        wk, wv, wpos = cache.append(k, v, pos)
        fk, fv, fpos = full.append(k, v, pos)
        held = wk.shape[2] - t
        assert held == min(window.keep, full.length - t)        # the last size - 1 only
        assert torch.equal(wk, fk[:, :, -wk.shape[2]:]) and torch.equal(wpos, fpos[-len(wpos):])
    assert cache.k.shape[2] == window.keep and cache.length == full.length == 9
    with pytest.raises(UserError, match="exceeds the KV cache size 20"):
        cache.append(torch.randn(2, 1, 12, 4), torch.randn(2, 1, 12, 4), torch.arange(9, 21))


def test_make_caches_rolls_windowed_layers_only():
    caches = make_caches(2, 1, 2, 4, 32, torch.float32, "cpu",
                         windows=[Window("sliding", 5), None])
    assert isinstance(caches[0], WindowedKVCache) and caches[0].k.shape[2] == 4
    assert type(caches[1]) is KVCache and caches[1].k.shape[2] == 32


@pytest.mark.parametrize("window", [Window("sliding", 100), Window("chunked", 128)])
def test_flex_skips_blocks_outside_the_window_and_stays_exact(window):
    """Past FlexAttention's block size (128) the block mask skips the blocks a window
    cannot see, and the output still equals eager's."""
    from posenc.attention.backends import _masked_block_mask
    n = 300
    pos = torch.arange(n)
    masks = Masks(window=window, q_pos=pos, k_pos=pos)
    block_mask = _masked_block_mask(n, n, "cpu", True, masks)
    counts = block_mask.kv_num_blocks[0, 0].tolist()
    assert counts == ([1, 2, 2] if window.kind == "sliding" else [1, 1, 1])
    torch.manual_seed(0)
    pe = build_encoding("rope", n_heads=1, head_dim=32)
    q, k, v = (torch.randn(1, 1, n, 32) for _ in range(3))
    eager, _ = attend(q, k, v, pe, _call(pos, pos, window, "eager"))
    flex, _ = attend(q, k, v, pe, _call(pos, pos, window, "flex"))
    torch.testing.assert_close(flex, eager, atol=1e-5, rtol=1e-5)
