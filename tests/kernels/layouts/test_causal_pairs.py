"""Row groups of a causal square block and the distances each group's table holds."""

from __future__ import annotations

import itertools

import pytest
import torch

from posenc.kernels.layouts.causal_pairs import causal_pair_bias, row_groups
from tests.kernels.helpers import pair_leaves as _leaves

pytestmark = pytest.mark.usefixtures("single_thread")
needs_kernel = pytest.mark.usefixtures("native_pairs")


def test_row_groups_cover_the_rows():
    """Consecutive groups from 0 to L, multiples of 8 rows but the last, at most four."""
    assert row_groups(7) == ((0, 7),)
    assert row_groups(256) == ((0, 64), (64, 128), (128, 192), (192, 256))
    for n in (1, 33, 100, 130, 1000):
        groups = row_groups(n)
        assert groups[0][0] == 0 and groups[-1][1] == n and len(groups) <= 4
        assert all(b == c for (_, b), (c, _) in itertools.pairwise(groups))
        assert all((b - a) % 8 == 0 for a, b in groups[:-1])


@needs_kernel
def test_tables_hold_only_the_distances_their_rows_see():
    """Query group [a, b) has b columns, key group [a, b) has L - a: 5/8 of full tables at
    L = 256 with four groups; the gradient of unread table entries is zero."""
    q, k, hq, hk = _leaves(1, 2, 256, seed=3)
    bias = causal_pair_bias(q, k, hq, hk)
    widths = [t.shape[-1] for t in bias.inputs]
    assert widths == [64, 128, 192, 256, 256, 192, 128, 64]
    assert sum(t[0, 0].numel() for t in bias.inputs) == 2 * 256 * 256 * 5 // 8
    grads = bias.grads([(0, torch.ones(1, 2, 256, 256))])
    # query row i of group [a, b) reads columns b - 1 - i.. only; key row j up to L - 1 - j
    assert not grads[1][0, 0, 0, :63].any() and grads[1][0, 0, 0, 63:].all()
    assert not grads[7][0, 0, -1, 1:].any() and grads[7][0, 0, -1, 0] == 1
    assert not grads[5][0, 0, -1, 129:].any() and grads[5][0, 0, -1, :129].all()
