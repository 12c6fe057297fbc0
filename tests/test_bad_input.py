"""Bad input raises ValueError naming the option (and its valid range); nothing is silently
clipped, truncated or overridden."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.attention import MultiHeadAttention

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
