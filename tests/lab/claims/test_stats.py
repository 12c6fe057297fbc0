"""Noise estimates of the lab: spread, bootstrap, the decision rule, ties."""

import math

import numpy as np
import pytest

from posenc.lab.claims.stats import (
    Estimate,
    beyond,
    block_bootstrap_ppl,
    bootstrap_ppl,
    separated,
    tie_groups,
)


def test_estimate_is_mean_and_sample_std():
    est = Estimate.of([1.0, 2.0, 3.0, float("nan")])
    assert (est.mean, est.spread, est.n) == (2.0, 1.0, 3)
    assert Estimate.of([4.0]).spread == 0.0


def test_separated_needs_non_overlapping_intervals():
    a = Estimate(10.0, 1.0)
    assert separated(a, Estimate(12.5, 1.0)) and not separated(a, Estimate(11.5, 1.0))
    assert not separated(a, Estimate(12.5, 2.0))          # more spread: undecided
    assert beyond(a, 11.5) and not beyond(a, 10.5)


def test_tie_groups_follow_overlap():
    ests = [Estimate(1.0, 0.1), Estimate(1.1, 0.1), Estimate(2.0, 0.1), Estimate(2.05, 0.1),
            Estimate(3.0, 0.0)]
    assert tie_groups(ests) == [1, 1, 2, 2, 3]


def test_bootstrap_ppl_is_centred_and_shrinks_with_more_windows():
    rng = np.random.default_rng(0)
    few, many = rng.normal(2.0, 0.3, 16), rng.normal(2.0, 0.3, 1024)
    s_few = bootstrap_ppl(few, [63] * 16).std()
    s_many = bootstrap_ppl(many, [63] * 1024).std()
    assert s_many < s_few / 4
    assert np.median(bootstrap_ppl(many, [63] * 1024)) == pytest.approx(
        math.exp(many.mean()), rel=0.01)


def test_block_bootstrap_pairs_lengths_so_text_difficulty_cancels():
    """Windows of 64 and 512 tokens over the same text: hard stretches are hard at both
    lengths. Paired blocks give the ratio a far smaller spread than independent resampling."""
    rng = np.random.default_rng(1)
    difficulty = rng.normal(0.0, 0.5, 32)                      # one value per 512 tokens
    short = np.repeat(difficulty, 8) + 2.0 + rng.normal(0, 0.02, 256)
    long = difficulty + 2.1 + rng.normal(0, 0.02, 32)
    paired = (block_bootstrap_ppl(long, [511] * 32, range(32), 32)
              / block_bootstrap_ppl(short, [63] * 256, [i // 8 for i in range(256)], 32))
    unpaired = bootstrap_ppl(long, [511] * 32) / bootstrap_ppl(short, [63] * 256, seed=5)
    assert paired.std() < unpaired.std() / 5
    assert np.median(paired) == pytest.approx(math.exp(0.1), rel=0.01)
    with pytest.raises(ValueError, match="block index"):
        block_bootstrap_ppl(long, [511] * 32, range(32), 16)


def test_ties_do_not_chain():
    """a ~ b and b ~ c, but a and c differ: c starts a new group instead of joining a's."""
    ests = [Estimate(1.0, 0.1), Estimate(1.15, 0.1), Estimate(1.3, 0.1), Estimate(1.35, 0.1)]
    assert tie_groups(ests) == [1, 1, 2, 2]


def test_bootstrap_over_query_blocks_pairs_runs_on_the_same_text():
    from posenc.lab.claims.stats import bootstrap_query_mean
    text = np.random.default_rng(3).normal(0.0, 1.0, 64)          # the text's own difficulty
    a, b = bootstrap_query_mean(2.0 + text), bootstrap_query_mean(2.1 + text)
    assert a.shape == (400,) and np.mean(a) == pytest.approx(2.0 + text.mean(), abs=0.05)
    assert separated(Estimate(2.0, a.std(), "bootstrap", 400, a),
                     Estimate(2.1, b.std(), "bootstrap", 400, b))            # paired: decided
    assert not separated(Estimate(2.0, a.std()), Estimate(2.1, b.std()))   # unpaired: not
