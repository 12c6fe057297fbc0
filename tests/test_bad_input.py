"""Bad input raises ValueError naming the option (and its valid range); nothing is silently
clipped, truncated or overridden."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.attention import KVCache, MultiHeadAttention

pytestmark = pytest.mark.usefixtures("single_thread")


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
