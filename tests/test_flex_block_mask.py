"""The flex backend's causal mask: the BlockMask built from block-wise position ranges equals
the one ``create_block_mask`` builds from every (query, key) pair, and both mask_mods (index
offset for position ranges, gathered positions otherwise) agree with eager attention."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.attention.backends import _causal_block_mask, attend
from posenc.encodings import build_encoding

flex_attention = pytest.importorskip("torch.nn.attention.flex_attention")


def _positions():
    gen = torch.Generator().manual_seed(0)
    yield torch.arange(512), torch.arange(512)                    # aligned, whole blocks
    yield torch.arange(257), torch.arange(257)                    # a one-position tail block
    yield torch.arange(300, 301), torch.arange(301)               # one decoded query
    yield torch.arange(100, 400), torch.arange(400)               # queries after a cache
    yield torch.arange(5, 205), torch.arange(130, 460)            # keys ahead of queries
    yield torch.randint(0, 500, (333,), generator=gen), torch.randint(0, 500, (517,),
                                                                      generator=gen)


@pytest.mark.parametrize("q_pos,k_pos", list(_positions()))
def test_block_mask_equals_create_block_mask(q_pos, k_pos):
    def mask_mod(b, h, q_idx, kv_idx):
        return k_pos[kv_idx] <= q_pos[q_idx]

    ours = _causal_block_mask(q_pos, k_pos, mask_mod)
    ref = flex_attention.create_block_mask(mask_mod, None, None, q_pos.numel(), k_pos.numel(),
                                           device="cpu")
    assert ours.seq_lengths == ref.seq_lengths
    for field in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                  "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices"):
        assert torch.equal(getattr(ours, field), getattr(ref, field)), field
    assert torch.equal(ours.to_dense(), ref.to_dense())


def _attend_both(pe, q_pos, k_pos):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, q_pos.numel(), 8, generator=gen)
    k, v = (torch.randn(1, 2, k_pos.numel(), 8, generator=gen) for _ in range(2))
    with torch.no_grad():
        out = attend(q, k, v, pe, q_pos, k_pos, causal=True, backend="flex")[0]
        ref = attend(q, k, v, pe, q_pos, k_pos, causal=True, backend="eager")[0]
    return out, ref


def test_flex_causal_masks_match_eager_without_recompiling():
    """Position ranges use the index mask (one compiled kernel for every cache offset);
    other positions gather them. Both agree with eager."""
    from torch._dynamo.utils import counters

    pe = build_encoding("alibi", n_heads=2, head_dim=8)
    k_pos = torch.arange(24)
    for start in (8, 13):                                     # two cache offsets
        if start == 13:
            compiled = counters["stats"]["unique_graphs"]
        out, ref = _attend_both(pe, torch.arange(start, start + 11), k_pos)
        assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert counters["stats"]["unique_graphs"] == compiled
    packed = torch.cat((torch.arange(12), torch.arange(12)))  # two packed documents' positions
    out, ref = _attend_both(pe, packed[-11:], packed)
    assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_bidirectional_flex_matches_eager_when_lengths_are_not_block_multiples():
    """Bidirectional flex (no block mask) with an incomplete last query and key block."""
    torch.manual_seed(0)
    pe = build_encoding("alibi", n_heads=2, head_dim=32, bidirectional=True)
    q, k, v = torch.randn(1, 2, 128, 32), torch.randn(1, 2, 200, 32), torch.randn(1, 2, 200, 32)
    q_pos, k_pos = torch.arange(128), torch.arange(200)
    with torch.no_grad():
        flex, _ = attend(q, k, v, pe, q_pos, k_pos, causal=False, backend="flex")
        eager, _ = attend(q, k, v, pe, q_pos, k_pos, causal=False, backend="eager")
    torch.testing.assert_close(flex, eager, atol=1e-5, rtol=1e-5)
