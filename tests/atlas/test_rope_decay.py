"""The atlas's RoPE decay panel against closed forms: RoFormer's decay bound, and random
scores that decay only for alike vectors."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.atlas.rope_decay import mean_abs_score, relative_decay_bound, sampled_distances


@pytest.mark.parametrize("theta", [1e4, 5e5])
@pytest.mark.parametrize("head_dim", [16, 128])
def test_decay_bound_is_largest_at_distance_zero(theta, head_dim):
    distances = sampled_distances(1 << 14)
    bound = relative_decay_bound(distances, head_dim, theta)
    # at r = 0 every partial sum S_j has |S_j| = j, so the mean over j = 1..d/2 is (d/2+1)/2
    assert distances[0] == 0
    assert bound[0].item() == pytest.approx((head_dim // 2 + 1) / 2, rel=1e-12)
    assert bool((bound[1:] < bound[0]).all())
    # and it decays: far distances sit well below the start
    assert bound[-20:].mean() < 0.5 * bound[0]


def test_decay_bound_matches_a_direct_sum():
    r, d, theta = 37, 16, 1e4
    thetas = [theta ** (-2 * i / d) for i in range(d // 2)]
    partial = [sum(complex(math.cos(r * t), math.sin(r * t)) for t in thetas[:j])
               for j in range(1, d // 2 + 1)]
    expected = sum(abs(s) for s in partial) / (d // 2)
    got = relative_decay_bound(torch.tensor([r]), d, theta)[0].item()
    assert got == pytest.approx(expected, rel=1e-6)          # fp32 frequencies


def test_random_scores_decay_only_for_alike_vectors():
    distances = torch.tensor([0, 1, 4096, 8192, 16384])
    same = mean_abs_score(distances, theta=1e4, same_vector=True, head_dim=64, samples=128)
    other = mean_abs_score(distances, theta=1e4, same_vector=False, head_dim=64, samples=128)
    assert same[0].item() == pytest.approx(64, rel=0.1)          # E|q|^2 = d
    assert same[2:].max() < 0.5 * same[0]
    # independent pairs: a rotation leaves the distribution alone, so no trend
    assert other.max() / other.min() < 1.5
