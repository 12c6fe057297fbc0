"""T5: buckets against the seed table and Hugging Face's, and the bias as a lookup in the
bucket table."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.encodings.context import HookContext
from posenc.encodings.t5 import relative_position_bucket
from tests.helpers import needs_transformers

pytestmark = pytest.mark.usefixtures("single_thread")

# T5 buckets for i - j = 0..30 (bidirectional, 32 buckets, max distance 128), from the notes
SEED_T5_TABLE = [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 9, 9, 9, 9] + [10] * 7 + [11] * 8


def test_t5_buckets_equal_the_seed_table():
    i_minus_j = torch.arange(31)
    buckets = relative_position_bucket(-i_minus_j, bidirectional=True, num_buckets=32,
                                       max_distance=128)
    assert buckets.tolist() == SEED_T5_TABLE


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (16, 9)])
def test_t5_buckets_monotone_and_bounded(bidirectional, num_buckets, max_distance):
    dist = torch.arange(0, 4 * max_distance)
    past = relative_position_bucket(-dist, bidirectional, num_buckets, max_distance)
    assert (past[1:] >= past[:-1]).all()                       # monotone in distance
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    assert past[:exact].tolist() == list(range(exact))        # near distances: own bucket
    top = (num_buckets // 2 if bidirectional else num_buckets) - 1
    assert past.max() == top and (past[dist >= max_distance] == top).all()
    future = relative_position_bucket(dist, bidirectional, num_buckets, max_distance)
    if bidirectional:                                          # keys after the query
        assert (future[1:] >= future[:-1]).all()
        assert (future[1:] >= num_buckets // 2).all() and future.max() == num_buckets - 1
        assert_close(future[1:] - num_buckets // 2, past[1:])  # mirrored
    else:
        assert (future == 0).all()


def test_t5_bias_is_the_bucket_table_lookup():
    pe = build_encoding("t5", n_heads=3, head_dim=4, num_buckets=8, max_distance=16)
    with torch.no_grad():
        pe.bias.weight.copy_(torch.randn(8, 3))
    q_pos, k_pos = torch.arange(10, 14), torch.arange(14)
    bias = pe.score_bias(None, None,
                         HookContext.for_positions(q_pos, k_pos, causal=True))[0]    # (H, Lq, Lk)
    buckets = relative_position_bucket(k_pos[None, :] - q_pos[:, None], False, 8, 16)
    assert_close(bias, pe.bias.weight[buckets].permute(2, 0, 1))


# ---------------------------------------------------------------- against Hugging Face
@needs_transformers
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (16, 64), (8, 20), (64, 512)])
def test_t5_buckets_match_hf(bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention
    rel = torch.arange(-3 * max_distance, 3 * max_distance + 1)[None, :] \
        + torch.arange(0, 5)[:, None]                                   # (5, N) both signs
    want = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional,
                                                 num_buckets=num_buckets,
                                                 max_distance=max_distance)
    got = relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    assert torch.equal(got, want)
