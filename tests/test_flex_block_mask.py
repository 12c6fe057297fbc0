"""The causal BlockMask built from block-wise position ranges equals the one
``create_block_mask`` builds by evaluating the mask on every (query, key) pair."""

from __future__ import annotations

import pytest
import torch

from posenc.attention.backends import _causal_block_mask

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
