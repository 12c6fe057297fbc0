"""ALiBi and T5: slopes, buckets (against the seed table), translation invariance."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.encodings.alibi import alibi_slopes
from posenc.encodings.t5 import relative_position_bucket

pytestmark = pytest.mark.usefixtures("single_thread")

# T5 buckets for i - j = 0..30 (bidirectional, 32 buckets, max distance 128), from the notes
SEED_T5_TABLE = [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 9, 9, 9, 9] + [10] * 7 + [11] * 8


# ------------------------------------------------------------------------------- ALiBi
def test_alibi_slopes_power_of_two():
    assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert_close(alibi_slopes(4), torch.tensor([2.0 ** -(2 * (i + 1)) for i in range(4)]))
    assert_close(alibi_slopes(1), torch.tensor([2.0 ** -8]))


@pytest.mark.parametrize("n", [3, 5, 6, 12, 24, 40])
def test_alibi_slopes_other_head_counts(n):
    """The closest smaller power of two c, then every other slope of 2c (the paper, BLOOM)."""
    c = 2 ** (n.bit_length() - 1)
    want = [2.0 ** (-8 * (i + 1) / c) for i in range(c)]
    want += [2.0 ** (-8 * (i + 1) / (2 * c)) for i in range(0, 2 * (n - c), 2)]
    assert_close(alibi_slopes(n), torch.tensor(want))
    assert len(set(alibi_slopes(n).tolist())) == n            # all distinct


@pytest.mark.parametrize("bidirectional", [False, True])
def test_alibi_bias_values(bidirectional):
    pe = build_encoding("alibi", n_heads=4, head_dim=8, bidirectional=bidirectional)
    pos = torch.arange(6)
    bias = pe.score_bias(None, None, pos, pos)[0]              # (H, Lq, Lk)
    rel = (pos[None, :] - pos[:, None]).float()                # j - i
    dist = -rel.abs() if bidirectional else rel
    assert_close(bias, alibi_slopes(4)[:, None, None] * dist)
    if bidirectional:
        assert_close(bias, bias.transpose(-1, -2))             # symmetric


# ---------------------------------------------------------------------------------- T5
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
    bias = pe.score_bias(None, None, q_pos, k_pos)[0]          # (H, Lq, Lk)
    buckets = relative_position_bucket(k_pos[None, :] - q_pos[:, None], False, 8, 16)
    assert_close(bias, pe.bias.weight[buckets].permute(2, 0, 1))


# -------------------------------------------------------------------- shared properties
@pytest.mark.parametrize("name,options", [
    ("alibi", {}), ("alibi", {"bidirectional": True}),
    ("t5", {}), ("t5", {"bidirectional": True, "num_buckets": 16, "max_distance": 40}),
])
def test_bias_is_translation_invariant(name, options):
    pe = build_encoding(name, n_heads=4, head_dim=8, **options)
    with torch.no_grad():
        for p in pe.parameters():
            p.copy_(torch.randn(p.shape))
    q_pos, k_pos = torch.arange(20, 30), torch.arange(30)
    base = pe.score_bias(None, None, q_pos, k_pos)
    for shift in (1, 17, 5000):
        assert_close(pe.score_bias(None, None, q_pos + shift, k_pos + shift), base)
    # and not constant: it depends on the distance
    assert (base[..., -1, -1] - base[..., -1, 0]).abs().max() > 1e-3
