"""Bad input raises ValueError naming the option (and its valid range); nothing is silently
clipped, truncated or overridden."""

from __future__ import annotations

import copy

import pytest
import torch

from posenc import LMConfig, TransformerLM, build_encoding, list_encodings
from posenc.attention import KVCache, MultiHeadAttention
from posenc.encodings.rope_scaling import compute_inv_freq

pytestmark = pytest.mark.usefixtures("single_thread")


def _rope(head_dim=8, **options):
    return build_encoding("rope", n_heads=2, head_dim=head_dim, **options)


# ------------------------------------------------------------------------- registry
def test_unknown_encoding_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown encoding 'ropey'") as err:
        build_encoding("ropey", n_heads=2, head_dim=8)
    assert all(name in str(err.value) for name in list_encodings())
    with pytest.raises(ValueError, match="valid encodings"):
        TransformerLM(LMConfig(pe="ropey"))


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ValueError, match="thetta") as err:
        _rope(thetta=500000.0)
    for option in ("theta", "layout", "rotary_dim", "scaling", "logn_base_len"):
        assert option in str(err.value)
    with pytest.raises(ValueError, match="bidirectional"):
        build_encoding("nope", n_heads=2, head_dim=8, bidirectional=True)


@pytest.mark.parametrize("name,options,option", [
    ("rope", {"layout": "neox"}, "layout"),
    ("rope", {"theta": 1.0}, "theta"),
    ("rope", {"logn_base_len": 1}, "logn_base_len"),
    ("alibi", {"bidirectional": "yes"}, "bidirectional"),
    ("t5", {"num_buckets": 1}, "num_buckets"),
    ("t5", {"num_buckets": 32, "max_distance": 16}, "max_distance"),
    ("sinusoidal", {"scale": -1.0}, "scale"),
    ("learned", {}, "max_len"),
])
def test_option_out_of_range_is_named(name, options, option):
    with pytest.raises(ValueError, match=option):
        build_encoding(name, n_heads=2, head_dim=8, **options)


# ------------------------------------------------------------------------------ RoPE
@pytest.mark.parametrize("head_dim", [7, 1, 33])
def test_rope_odd_head_dim(head_dim):
    with pytest.raises(ValueError, match=f"head_dim={head_dim}"):
        _rope(head_dim=head_dim)
    with pytest.raises(ValueError, match="head_dim"):     # d_model 28 / 4 heads = 7
        TransformerLM(LMConfig(d_model=4 * head_dim, n_heads=4, pe="rope"))


@pytest.mark.parametrize("rotary_dim", [10, 16, 3, 0, -2, 4.0, True])
def test_rope_bad_rotary_dim(rotary_dim):
    with pytest.raises(ValueError, match=r"rotary_dim must be an even integer in \[2, "
                                         r"head_dim=8\]"):
        _rope(rotary_dim=rotary_dim)


@pytest.mark.parametrize("scaling,message", [
    ({"rope_type": "linear"}, "'factor'"),
    ({"rope_type": "linear", "factor": None}, "'factor'"),
    ({"rope_type": "linear", "factor": 0.0}, "factor must be a positive number"),
    ({"rope_type": "linear", "factor": -2.0}, "factor must be a positive number"),
    ({"rope_type": "linear", "factor": float("nan")}, "factor"),
    ({"rope_type": "linear", "factor": "2"}, "factor"),
    ({"rope_type": "dynamic"}, "'factor'"),
    ({"rope_type": "ntk", "factor": 0.5}, "factor must be >= 1"),
    ({"rope_type": "yarn", "factor": 0.0}, "factor"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}, "'high_freq_factor'"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0},
     "high_freq_factor must be > low_freq_factor"),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": -1.0}, "beta_fast"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 0},
     "original_max_position_embeddings must be a positive int"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4},
     "'factor'"),
    ({"rope_type": "longrope", "factor": 2.0, "short_factor": [1.0] * 3,
      "long_factor": [1.0] * 4}, "short_factor needs rotary_dim/2 = 4 values"),
    ({"rope_type": "longrope", "factor": 2.0, "short_factor": [1.0, 0.0, 1.0, 1.0],
      "long_factor": [1.0] * 4}, "short_factor must be a list of positive numbers"),
])
def test_bad_scaling_factor_or_parameter(scaling, message):
    with pytest.raises(ValueError, match=message):
        _rope(max_len=16, scaling=scaling)


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


# ------------------------------------------------------------ nothing silently changed
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


# ------------------------------------------------------------------- model and cache
@pytest.mark.parametrize("d_model,n_heads", [(30, 4), (32, 5), (8, 16)])
def test_n_heads_must_divide_d_model(d_model, n_heads):
    with pytest.raises(ValueError, match=f"n_heads={n_heads} must divide d_model={d_model}"):
        LMConfig(d_model=d_model, n_heads=n_heads)
    with pytest.raises(ValueError, match="n_heads"):
        MultiHeadAttention(d_model, n_heads)


@pytest.mark.parametrize("field,value", [
    ("vocab_size", 0), ("n_layers", -1), ("max_len", 0), ("d_ff", 0), ("dropout", 1.0),
    ("norm_eps", 0.0), ("norm", "batchnorm"), ("activation", "tanh"),
    ("norm_placement", "middle"),
])
def test_bad_model_config_is_named(field, value):
    with pytest.raises(ValueError, match=field):
        TransformerLM(LMConfig(**{"d_model": 32, "n_heads": 4, field: value}))


def test_unknown_config_key_lists_valid_ones():
    with pytest.raises(ValueError, match="n_head.*valid:.*n_heads"):
        LMConfig.from_dict({"n_head": 4})


def _learned_model(max_len=8):
    return TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1,
                                  max_len=max_len, pe="learned")).eval()


def test_learned_table_exceeded_in_forward():
    model = _learned_model()
    model(torch.zeros(1, 8, dtype=torch.long))                 # exactly the table: fine
    with pytest.raises(ValueError, match=r"position 8 .*\[0, 8\) \(max_len=8\)"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=8"):
        model(torch.zeros(1, 2, dtype=torch.long), pos=torch.tensor([7, 8]))


def test_learned_table_exceeded_in_generate():
    model = _learned_model()
    # the last new token is never fed back, so 5 + 4 tokens only encode positions 0..7
    assert model.generate(torch.zeros(1, 5, dtype=torch.long), 4).shape == (1, 9)
    with pytest.raises(ValueError, match="position 8 .*max_len=8"):
        model.generate(torch.zeros(1, 5, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="max_len=8"):
        model.generate(torch.zeros(1, 9, dtype=torch.long), 1)


@pytest.mark.parametrize("options", [{}, {"scaling": {"rope_type": "dynamic", "factor": 2.0}}])
@torch.no_grad()
def test_sequence_past_the_cache_size(options):
    model = TransformerLM(LMConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=2,
                                   max_len=4, pe="rope", pe_options=options)).eval()
    ids = torch.randint(0, 16, (1, 8))
    caches = model.make_caches(1, 8)
    model(ids[:, :6], caches=caches)
    with pytest.raises(ValueError, match=r"sequence length 9 exceeds the KV cache size 8; "
                                         r"valid lengths are 1..8"):
        model(ids[:, :3], caches=caches)
    assert all(c.length == 6 for c in caches)                 # nothing was half-written
    torch.testing.assert_close(model(ids[:, 6:], caches=caches), model(ids)[:, 6:])


def test_cache_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        KVCache(1, 2, 4, 0)


@pytest.mark.parametrize("kwargs,message", [
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"max_new_tokens": 2, "temperature": -0.5}, "temperature"),
    ({"max_new_tokens": 2, "temperature": 1.0, "top_k": 0}, "top_k"),
])
def test_bad_generation_arguments(kwargs, message):
    model = _learned_model()
    with pytest.raises(ValueError, match=message):
        model.generate(torch.zeros(1, 2, dtype=torch.long), **kwargs)


def test_ids_must_be_two_dimensional():
    with pytest.raises(ValueError, match=r"ids must be \(batch, length\)"):
        _learned_model()(torch.zeros(5, dtype=torch.long))


def test_backend_the_encoding_cannot_run_is_refused():
    model = TransformerLM(LMConfig(d_model=16, n_heads=2, n_layers=1, pe="alibi"))
    with pytest.raises(ValueError, match="backend 'fast'.*valid: auto, sdpa, flex, eager"):
        model(torch.zeros(1, 3, dtype=torch.long), backend="fast")
