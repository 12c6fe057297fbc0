"""RoPE frequency scalings and log-n attention scaling: properties that define each of them."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import build_encoding
from posenc.encodings.rope_scaling import (base_inv_freq, compute_inv_freq, parse_scaling_spec,
                                           scaling_types)
from posenc.encodings.rotary_kernels import apply_rotary

pytestmark = pytest.mark.usefixtures("single_thread")

D, THETA, ORIG = 64, 10000.0, 256
DEFAULT = base_inv_freq(D, THETA)


def test_default_is_theta_power():
    want = torch.tensor([THETA ** (-2 * i / D) for i in range(D // 2)], dtype=torch.float64)
    inv_freq, factor = compute_inv_freq(D, THETA)
    assert inv_freq.dtype == torch.float32 and factor == 1.0
    assert_close(inv_freq.double(), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("factor", [0.5, 2.0, 8.0])
def test_linear_is_default_over_factor(factor):
    inv_freq, attn = compute_inv_freq(D, THETA, {"rope_type": "linear", "factor": factor})
    assert_close(inv_freq, DEFAULT / factor)
    assert attn == 1.0


def test_linear_rotates_position_p_like_default_at_p_over_factor():
    """Position interpolation: scaled RoPE at p equals plain RoPE at the fractional p / s."""
    linear = build_encoding("rope", n_heads=1, head_dim=16,
                            scaling={"rope_type": "linear", "factor": 4.0})
    plain = build_encoding("rope", n_heads=1, head_dim=16)
    x, pos = torch.randn(1, 1, 6, 16), torch.tensor([0, 1, 4, 9, 100, 1001])
    cos, sin = plain.cos_sin(pos / 4.0, 0)          # hooks take integer positions only
    assert_close(linear.transform_qk(x, x, pos, pos)[0], apply_rotary(x, cos, sin))


@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_dynamic_is_default_up_to_the_original_length(factor):
    scaling = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": ORIG}
    for seq_len in (None, 1, ORIG // 2, ORIG - 1, ORIG):
        inv_freq, attn = compute_inv_freq(D, THETA, scaling, seq_len=seq_len)
        assert torch.equal(inv_freq, DEFAULT) and attn == 1.0
    longer, _ = compute_inv_freq(D, THETA, scaling, seq_len=4 * ORIG)
    assert longer[0] == DEFAULT[0]                       # highest frequency kept
    assert (longer[1:] < DEFAULT[1:]).all()              # every other one slowed down
    grown, _ = compute_inv_freq(D, THETA, scaling, seq_len=8 * ORIG)
    assert (grown[1:] < longer[1:]).all()                # and more so as the length grows


def test_dynamic_base_formula():
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": ORIG}
    seq_len = 3 * ORIG
    base = THETA * ((4.0 * seq_len / ORIG) - 3.0) ** (D / (D - 2))
    assert_close(compute_inv_freq(D, THETA, scaling, seq_len)[0], base_inv_freq(D, base))


@pytest.mark.parametrize("factor", [2.0, 8.0, 32.0])
def test_ntk_keeps_the_highest_and_interpolates_the_lowest_frequency(factor):
    """theta' = theta * s^(d/(d-2)) keeps inv_freq[0] and divides the lowest by exactly s."""
    inv_freq, attn = compute_inv_freq(D, THETA, {"rope_type": "ntk", "factor": factor})
    assert_close(inv_freq, base_inv_freq(D, THETA * factor ** (D / (D - 2))))
    assert inv_freq[0] == 1.0 and attn == 1.0
    assert_close(inv_freq[-1], DEFAULT[-1] / factor, rtol=1e-5, atol=0)


@pytest.mark.parametrize("extra,attn", [
    ({}, 0.1 * math.log(16.0) + 1.0),
    ({"mscale": 0.707, "mscale_all_dim": 0.707}, 1.0),
    ({"mscale": 1.0, "mscale_all_dim": 0.5},
     (0.1 * math.log(16.0) + 1.0) / (0.05 * math.log(16.0) + 1.0)),
    ({"attention_factor": 1.5}, 1.5),
])
def test_yarn_by_parts_and_attention_factor(extra, attn):
    scaling = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": ORIG,
               **extra}
    inv_freq, got_attn = compute_inv_freq(D, THETA, scaling)
    assert got_attn == pytest.approx(attn)
    wavelength = 2 * math.pi / DEFAULT
    fast = wavelength < ORIG / 32                 # > beta_fast rotations: kept
    slow = wavelength > ORIG / 1                  # < beta_slow rotations: interpolated
    assert fast.any() and slow.any()
    assert_close(inv_freq[fast], DEFAULT[fast])
    assert_close(inv_freq[slow], DEFAULT[slow] / 16.0)
    mid = ~fast & ~slow                           # in between: within the two bounds
    assert ((inv_freq[mid] <= DEFAULT[mid]) & (inv_freq[mid] >= DEFAULT[mid] / 16.0)).all()
    assert (inv_freq[1:] <= inv_freq[:-1]).all()  # still ordered


def test_yarn_truncate_false_uses_fractional_bounds():
    base = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": ORIG}
    trunc, _ = compute_inv_freq(D, THETA, base)
    exact, _ = compute_inv_freq(D, THETA, {**base, "truncate": False})
    assert not torch.equal(trunc, exact)
    assert_close(exact[0], trunc[0])              # both ends agree: kept and interpolated
    assert_close(exact[-1], trunc[-1])


def test_llama3_bands():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": ORIG}
    inv_freq, attn = compute_inv_freq(D, 500000.0, scaling)
    default = base_inv_freq(D, 500000.0)
    wavelength = 2 * math.pi / default
    high, low = wavelength < ORIG / 4.0, wavelength > ORIG / 1.0
    assert high.any() and low.any() and attn == 1.0
    assert_close(inv_freq[high], default[high])
    assert_close(inv_freq[low], default[low] / 8.0)
    mid = ~high & ~low
    assert ((inv_freq[mid] < default[mid]) & (inv_freq[mid] > default[mid] / 8.0)).all()


def test_longrope_switches_from_short_to_long_factors_past_the_original_length():
    short = [1.0 + i / 32 for i in range(D // 2)]
    long = [1.0 + i for i in range(D // 2)]
    scaling = {"rope_type": "longrope", "factor": 8.0, "original_max_position_embeddings": ORIG,
               "short_factor": short, "long_factor": long}
    attn = math.sqrt(1 + math.log(8.0) / math.log(ORIG))
    for seq_len, ext in ((None, short), (ORIG, short), (ORIG + 1, long), (10 * ORIG, long)):
        inv_freq, got = compute_inv_freq(D, THETA, scaling, seq_len=seq_len)
        assert_close(inv_freq, DEFAULT / torch.tensor(ext))
        assert got == pytest.approx(attn)


def test_every_scaling_type_is_covered():
    assert set(scaling_types()) == {"default", "linear", "ntk", "dynamic", "yarn", "llama3",
                                    "longrope"}


def test_legacy_type_key_is_accepted():
    new, _ = compute_inv_freq(D, THETA, {"rope_type": "linear", "factor": 2.0})
    old, _ = compute_inv_freq(D, THETA, {"type": "linear", "factor": 2.0})
    assert torch.equal(new, old)


def test_parse_scaling_spec():
    assert parse_scaling_spec("linear:2") == {"rope_type": "linear", "factor": 2.0}
    assert parse_scaling_spec("yarn:4", 512) == {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
    assert parse_scaling_spec("dynamic", 512)["factor"] == 1.0
    with pytest.raises(ValueError, match="valid"):
        parse_scaling_spec("cubic:2")
    with pytest.raises(ValueError, match="factor"):
        parse_scaling_spec("linear:two")


# ----------------------------------------------------------------------------- log-n
@pytest.mark.parametrize("base_len", [2, 8, 100])
def test_logn_factor_is_one_up_to_base_len_then_log_ratio(base_len):
    pe = build_encoding("nope", n_heads=2, head_dim=8, logn_base_len=base_len)
    q_pos = torch.arange(300)
    got = pe.attn_scale(q_pos, q_pos, causal=True)              # causal: query p sees p + 1
    n = q_pos.double() + 1
    want = torch.where(n <= base_len, torch.ones_like(n), torch.log(n) / math.log(base_len))
    assert_close(got.double(), want, rtol=1e-6, atol=0)
    # bidirectional: every query sees all keys
    for n_keys in (base_len, 3 * base_len):
        got = pe.attn_scale(torch.arange(4), torch.arange(n_keys), causal=False)
        want = max(1.0, math.log(n_keys) / math.log(base_len))
        assert_close(got.double(), torch.full((4,), want, dtype=torch.float64))


def test_logn_is_off_by_default():
    pe = build_encoding("rope", n_heads=2, head_dim=8)
    assert pe.attn_scale(torch.arange(9), torch.arange(9), causal=True) is None


@torch.no_grad()
def test_logn_changes_logits_only_past_base_len(tiny_lm):
    ids = torch.randint(0, 48, (1, 16))
    plain = tiny_lm("alibi")(ids)
    scaled = tiny_lm("alibi", {"logn_base_len": 6})(ids)          # same weights (same seed)
    assert_close(scaled[:, :6], plain[:, :6])
    assert ((scaled[:, 6:] - plain[:, 6:]).abs().amax(-1) > 1e-4).all()
