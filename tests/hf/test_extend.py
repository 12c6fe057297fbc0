"""Extending the context of Hugging Face models (tiny random Llama / Mistral / Qwen2):
the patch against Hugging Face's own rope scalings, restore, a long forward that never holds a
score matrix, and bad arguments. Log-n and the exact cache: test_patched_attention.py."""

from __future__ import annotations

import types

import pytest
import torch

from tests.hf.helpers import ORIG, T
from tests.hf.helpers import logits_of as _logits
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.hf import extend, hf_rope_parameters, restore  # noqa: E402
from posenc.hf.architectures import extended_rope, with_extended_rope  # noqa: E402
from posenc.hf.extend import current_extension, make_extension  # noqa: E402
from posenc.hf.measure import PeakMemory  # noqa: E402

LONG_FACTOR = [1.0 + 0.25 * i for i in range(8)]


# --------------------------------------------------------------- patching
KINDS = ["llama", "mistral", "qwen2", "qwen3", "gemma3_text", "smollm3", "phi3"]


@pytest.mark.parametrize("kind", KINDS)
def test_no_scaling_patch_equals_unpatched(kind, ids):
    model = _model(_config(kind))
    ref = _logits(model, ids)
    extend(model, "none")
    torch.testing.assert_close(_logits(model, ids), ref, atol=1e-4, rtol=0)
    restore(model)
    extend(model, "logn")                 # log-n is 1 inside the original context
    torch.testing.assert_close(_logits(model, ids[:, :ORIG]), ref[:, :ORIG], atol=1e-4, rtol=0)
    assert (_logits(model, ids)[:, ORIG:] - ref[:, ORIG:]).abs().max() > 1e-3
    restore(model)
    torch.testing.assert_close(_logits(model, ids), ref, atol=0, rtol=0)


HF_NATIVE = {
    "linear": ({"rope_type": "linear", "factor": 2.5}, {}),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.5}, {}),
    "yarn": ({"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": ORIG},
             {}),
    "yarn-options": ({"rope_type": "yarn", "factor": 2.5, "beta_fast": 8.0, "beta_slow": 2.0,
                      "original_max_position_embeddings": ORIG},
                     {"beta_fast": 8.0, "beta_slow": 2.0}),
    "llama3": ({"rope_type": "llama3", "factor": 2.5, "original_max_position_embeddings": ORIG,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0}, {}),
    "longrope": ({"rope_type": "longrope", "factor": 2.5, "original_max_position_embeddings":
                  ORIG, "long_factor": LONG_FACTOR, "short_factor": [1.0] * 8},
                 {"long_factor": LONG_FACTOR, "short_factor": [1.0] * 8}),
}


@pytest.mark.parametrize("case", sorted(HF_NATIVE))
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3", "gemma3_text", "smollm3", "phi3"])
def test_native_methods_equal_hugging_face(case, kind, ids):
    """A default model patched by extend == a model built with that rope_parameters (Gemma 3:
    on its full layers; its sliding layers keep their local theta)."""
    params, options = HF_NATIVE[case]
    method = params["rope_type"]
    patched = _model(_config(kind))
    plain = _logits(patched, ids)
    theta = float(extended_rope(patched.config)["rope_theta"])
    config = _config(kind)
    config.rope_parameters = with_extended_rope(config, {**params, "rope_theta": theta})
    if method != "dynamic":
        config.max_position_embeddings = int(ORIG * 2.5)
    oracle = _model(config)
    oracle.load_state_dict(patched.state_dict())
    extend(patched, method, 2.5, **options)
    for length in (ORIG, T):          # inside and beyond the original context
        torch.testing.assert_close(_logits(patched, ids[:, :length]),
                                   _logits(oracle, ids[:, :length]), atol=1e-4, rtol=1e-5)
    assert (_logits(patched, ids) - plain).abs().max() > 1e-2    # the scaling does something


def test_restore_brings_back_model_and_config(ids):
    model = _model(_config())
    ref, before = _logits(model, ids), model.config.to_dict()
    ext = extend(model, "yarn+logn", 2.0)
    assert current_extension(model) == ext and ext.name == "yarn+logn"
    assert model.config.rope_parameters["rope_type"] == "yarn"
    assert model.config.posenc_extension["logn"] is True
    restore(model)
    assert current_extension(model) is None
    assert model.config.to_dict() == before
    torch.testing.assert_close(_logits(model, ids), ref, atol=0, rtol=0)


# ------------------------------------------------------------- bad input
def test_model_without_rope_is_refused():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2,
                                                                vocab_size=50))
    with pytest.raises(ValueError, match="'gpt2' has no rotary .*supported model types: llama"):
        extend(gpt2, "yarn", 2.0)


@pytest.mark.parametrize("method,factor,options,message", [
    ("linear", 1.0, {}, "needs factor > 1"),
    ("yarn", 0.5, {}, "needs factor > 1"),
    ("dynamic", 0.9, {}, "needs factor >= 1"),
    ("none", 2.0, {}, "takes no factor"),
    ("yarn", None, {}, "needs a factor"),
    ("rope2", 2.0, {}, "unknown method 'rope2'.*valid: none, dynamic, linear"),
    ("yarn", 2.0, {"beta": 3}, "unknown option.*beta.*valid options"),
    ("longrope", 2.0, {}, "needs option 'long_factor'"),
    ("yarn+exact", 2.0, {}, "applies to methods whose frequencies follow the length"),
    ("yarn", 2.0, {"beta_fast": -1.0}, "beta_fast must be a positive number"),
])
def test_bad_arguments(method, factor, options, message):
    model = _model(_config())
    with pytest.raises(ValueError, match=message):
        extend(model, method, factor, **options)
    assert current_extension(model) is None


def test_missing_original_length_and_double_extension():
    config = types.SimpleNamespace(**{**_config().to_dict(), "max_position_embeddings": None})
    with pytest.raises(ValueError, match="needs original_max_position_embeddings"):
        make_extension(config, "yarn", 2.0)
    assert make_extension(config, "yarn", 2.0, 64).scaling["original_max_position_embeddings"] \
        == 64
    model = _model(_config())
    extend(model, "linear", 2.0)
    with pytest.raises(ValueError, match="already extended with 'linear'"):
        extend(model, "yarn", 2.0)
    scaled = _model(_config(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                             "rope_theta": 10000.0}))
    with pytest.raises(ValueError, match="already uses rope_type 'linear'"):
        extend(scaled, "yarn", 2.0)


def test_hf_rope_parameters_for_each_method():
    config = _config()
    assert hf_rope_parameters(make_extension(config, "dynamic", 2.0)) == (
        {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}, ORIG)
    rope, max_pos = hf_rope_parameters(make_extension(config, "yarn", 1.5))
    assert rope["original_max_position_embeddings"] == ORIG and max_pos == 48


@pytest.mark.parametrize("method", ["yarn", "yarn+logn", "dynamic+exact"])
def test_long_forward_never_holds_a_score_matrix(method):
    """4096 tokens: one layer's (H, T, T) fp32 scores would be 256 MiB; the forward (fused
    causal sdpa, also in posenc's patched attention) stays far below."""
    config = _config()
    config.vocab_size = 16
    model = _model(config)
    extend(model, method, 2.0)
    ids = torch.randint(0, 16, (1, 4096), generator=torch.Generator().manual_seed(4))
    with PeakMemory() as mem:
        logits = _logits(model, ids)
    assert logits.shape == (1, 4096, 16) and bool(torch.isfinite(logits).all())
    assert mem.delta < 64 * 2**20, f"peak +{mem.delta / 2**20:.0f} MiB"
