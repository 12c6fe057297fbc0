"""The atlas's RoPE scaling panels against closed forms: wavelengths, the scalings'
frequency ratios (YaRN's untouched and fully interpolated dimensions), the attention factor at
distance zero."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.atlas.rope_scalings import (
    FACTOR,
    HEAD_DIM,
    THETA,
    TRAIN_LEN,
    identical_pair_scores,
    scaled_frequencies,
    wavelengths,
)
from posenc.encodings.rope_scaling import compute_inv_freq


def test_wavelengths_are_two_pi_over_the_frequencies():
    freqs = scaled_frequencies()
    i = torch.arange(HEAD_DIM // 2, dtype=torch.float64)
    closed = 2 * math.pi * THETA ** (2 * i / HEAD_DIM)
    torch.testing.assert_close(wavelengths(freqs["none"]), closed, rtol=1e-6, atol=0)
    for label, inv_freq in freqs.items():
        torch.testing.assert_close(wavelengths(inv_freq),
                                   2 * math.pi / inv_freq.to(torch.float64))


def test_scaling_ratios_match_closed_forms():
    freqs = scaled_frequencies()
    base = freqs["none"]
    ratio = {label: freqs[label] / base for label in freqs}
    torch.testing.assert_close(ratio["linear PI"], torch.full_like(base, 1 / FACTOR))
    # YaRN: pairs turning more than beta_fast = 32 times inside L keep their frequency, pairs
    # turning less than beta_slow = 1 time are divided by the factor
    turns = TRAIN_LEN * base.double() / (2 * math.pi)
    fast, slow = turns > 32, turns < 1
    assert fast.sum() >= 10 and slow.sum() >= 10
    yarn = ratio["YaRN"]
    torch.testing.assert_close(yarn[fast], torch.ones_like(yarn[fast]))
    torch.testing.assert_close(yarn[slow], torch.full_like(yarn[slow], 1 / FACTOR))
    ramp = yarn[~fast & ~slow]
    assert bool((ramp < 1).all()) and bool((ramp > 1 / FACTOR).all())
    # NTK-aware: the base grows by s^(d/(d-2)), so the last pair is divided by exactly s
    assert ratio["NTK-aware"][0].item() == pytest.approx(1.0)
    assert ratio["NTK-aware"][-1].item() == pytest.approx(1 / FACTOR, rel=1e-5)
    # Llama 3: wavelengths below L/4 untouched, above L divided by s
    wave = 2 * math.pi / base.double()
    llama = ratio["Llama 3"]
    short, long = wave < TRAIN_LEN / 4, wave > TRAIN_LEN
    assert short.sum() >= 10 and long.sum() >= 10
    torch.testing.assert_close(llama[short], torch.ones_like(llama[short]))
    torch.testing.assert_close(llama[long], torch.full_like(llama[long], 1 / FACTOR))


def test_scores_at_distance_zero_carry_the_attention_factor():
    distances = torch.tensor([0, 5, TRAIN_LEN, 3 * TRAIN_LEN])
    plain = identical_pair_scores(None, distances)
    assert plain[0].item() == pytest.approx(1.0, abs=1e-5)
    yarn_scaling = {"rope_type": "yarn", "factor": FACTOR,
                    "original_max_position_embeddings": TRAIN_LEN}
    yarn = identical_pair_scores(yarn_scaling, distances)
    factor = compute_inv_freq(HEAD_DIM, THETA, yarn_scaling)[1]
    assert yarn[0].item() == pytest.approx(factor ** 2, rel=1e-5)
    dynamic = identical_pair_scores({"rope_type": "dynamic", "factor": FACTOR,
                                     "original_max_position_embeddings": TRAIN_LEN}, distances)
    # dynamic NTK equals plain RoPE inside the training length and differs beyond it
    torch.testing.assert_close(dynamic[:2], plain[:2])
    assert abs(dynamic[3] - plain[3]) > 1e-3
