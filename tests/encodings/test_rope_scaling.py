"""RoPE frequency scalings: the properties that define each of them; bad scalings are
refused with the option named, and what a user sets is never changed."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.testing import assert_close

from posenc import LMConfig, TransformerLM, build_encoding
from posenc.encodings.context import HookContext
from posenc.encodings.rope_scaling import (
    base_inv_freq,
    compute_inv_freq,
    dynamic_length,
    scaling_types,
    validate_scaling,
)
from posenc.kernels.rotary import apply_rotary
from tests.helpers import sharpen

pytestmark = pytest.mark.usefixtures("single_thread")

D, THETA, ORIG = 64, 10000.0, 256
DEFAULT = base_inv_freq(D, THETA)


def _rope(head_dim=8, **options):
    return build_encoding("rope", n_heads=2, head_dim=head_dim, **options)


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
    assert_close(linear.transform_qk(x, x, HookContext.for_positions(pos, pos))[0],
                 apply_rotary(x, cos, sin))


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
    for schedule, length in (("per_token", seq_len), ("stepped", 4 * ORIG)):
        base = THETA * ((4.0 * length / ORIG) - 3.0) ** (D / (D - 2))
        assert_close(compute_inv_freq(D, THETA, {**scaling, "schedule": schedule}, seq_len)[0],
                     base_inv_freq(D, base))


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


def test_unknown_scaling_type_or_key_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown scaling type 'cubic'") as err:
        _rope(scaling={"rope_type": "cubic", "factor": 2.0})
    assert all(t in str(err.value) for t in ("linear", "dynamic", "yarn", "llama3", "longrope"))
    with pytest.raises(ValueError, match="unknown key.* beta_fast .*valid keys: factor"):
        _rope(scaling={"rope_type": "linear", "factor": 2.0, "beta_fast": 32})
    with pytest.raises(ValueError, match="rope_type"):
        _rope(scaling={"factor": 2.0})
    with pytest.raises(ValueError, match="scaling must be a dict"):
        _rope(scaling="linear:2")


def test_scaling_without_an_original_length_needs_max_len():
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        _rope(scaling={"rope_type": "yarn", "factor": 4.0})      # no max_len to default it


def test_conflicting_theta_is_refused():
    with pytest.raises(ValueError, match="rope_theta"):
        compute_inv_freq(8, 10000.0, {"rope_type": "linear", "factor": 2.0,
                                      "rope_theta": 500000.0})


def test_user_scaling_values_are_kept():
    scaling = {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 100,
               "beta_fast": 20.0}
    before = copy.deepcopy(scaling)
    pe = _rope(max_len=50, scaling=scaling)                    # max_len differs: not used
    assert pe.scaling["original_max_position_embeddings"] == 100
    assert pe.scaling["factor"] == 3.0 and pe.scaling["beta_fast"] == 20.0
    assert scaling == before                                   # the caller's dict untouched
    want, _ = compute_inv_freq(8, 10000.0, scaling)
    assert torch.equal(pe.inv_freq, want)


def test_documented_default_original_length_is_max_len():
    pe = _rope(max_len=50, scaling={"rope_type": "dynamic", "factor": 2.0})
    assert pe.scaling["original_max_position_embeddings"] == 50


def test_model_config_options_are_not_mutated():
    options = {"scaling": {"rope_type": "linear", "factor": 2.0}}
    before = copy.deepcopy(options)
    model = TransformerLM(LMConfig(pe="rope", pe_options=options, d_model=32, n_heads=4))
    assert options == before and model.pe.scaling["factor"] == 2.0


# ------------------------------------------------------ dynamic NTK: stepped schedule
@pytest.mark.parametrize("seq_len,stepped,per_token", [
    (None, 64, 64), (1, 64, 64), (64, 64, 64), (65, 128, 65), (128, 128, 128),
    (129, 256, 129), (1000, 1024, 1000)])
def test_dynamic_length_of_each_schedule(seq_len, stepped, per_token):
    assert dynamic_length(seq_len, 64, "stepped") == stepped
    assert dynamic_length(seq_len, 64, "per_token") == per_token


def test_stepped_equals_per_token_at_thresholds_and_the_next_threshold_between():
    def freqs(schedule, seq_len):
        scaling = {"rope_type": "dynamic", "factor": 2.0,
                   "original_max_position_embeddings": 64, "schedule": schedule}
        return compute_inv_freq(32, 10000.0, scaling, seq_len)[0]

    for threshold in (64, 128, 256, 512):
        assert torch.equal(freqs("stepped", threshold), freqs("per_token", threshold))
    for seq_len, threshold in ((65, 128), (100, 128), (300, 512)):
        assert torch.equal(freqs("stepped", seq_len), freqs("per_token", threshold))
        assert not torch.equal(freqs("stepped", seq_len), freqs("per_token", seq_len))
    # the default is stepped
    default = compute_inv_freq(32, 10000.0, {"rope_type": "dynamic", "factor": 2.0,
                                             "original_max_position_embeddings": 64}, 100)[0]
    assert torch.equal(default, freqs("stepped", 100))


def test_unknown_dynamic_schedule_is_refused():
    with pytest.raises(ValueError, match="schedule must be one of 'stepped', 'per_token'"):
        validate_scaling({"rope_type": "dynamic", "factor": 2.0,
                          "original_max_position_embeddings": 64, "schedule": "weekly"})
    with pytest.raises(ValueError, match="unknown key.*schedule"):
        validate_scaling({"rope_type": "yarn", "factor": 2.0,
                          "original_max_position_embeddings": 64, "schedule": "stepped"})


@pytest.mark.parametrize("schedule,recomputes", [("stepped", 3), ("per_token", 32)])
def test_cached_decoding_is_exact_and_recomputes_once_per_doubling(monkeypatch, schedule,
                                                                    recomputes):
    """Original length 8, decoding to 40 tokens: the stepped schedule recomputes the history
    when the length passes 8, 16 and 32; per token at every token past 8. Both equal a full
    forward under their own schedule at every step."""
    from posenc import LMConfig, TransformerLM
    from posenc.attention.cache import KVCache

    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8,
               "schedule": schedule}
    model = sharpen(TransformerLM(LMConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2,
                                           max_len=8, pe="rope",
                                           pe_options={"scaling": scaling}))).eval()
    resets = []
    reset = KVCache.reset
    monkeypatch.setattr(KVCache, "reset", lambda self: (resets.append(1), reset(self)))
    ids = torch.randint(0, 32, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        caches = model.make_caches(1, 40)
        model(ids[:, :4], caches=caches)
        for t in range(4, 40):
            step = model(ids[:, t:t + 1], caches=caches)[:, -1]
            assert_close(step, model(ids[:, :t + 1])[:, -1], atol=1e-4, rtol=1e-4)
    assert len(resets) == recomputes * model.config.n_layers
