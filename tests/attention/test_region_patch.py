"""Region methods on posenc's own RoPE TransformerLM: cached decoding equals a full forward,
degenerate options give the unpatched model, remove restores it, what is refused (and why:
``region_ready``), and p-RoPE taken exactly."""

from __future__ import annotations

import pytest
import torch

from posenc import LMConfig, TransformerLM
from posenc.attention.region_patch import apply_region_method, region_ready, remove_region_method
from posenc.encodings.rope import RotaryEncoding
from posenc.methods.dual_chunk import DualChunk
from posenc.methods.leaky_rerope import LeakyReRoPE
from posenc.methods.rerope import ReRoPE
from posenc.methods.self_extend import SelfExtend
from posenc.methods.streaming import StreamingLLM
from tests.helpers import decode_in_steps

T = 40


def _model(pe="rope", **pe_options):
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(pe=pe, pe_options=pe_options, d_model=32, n_heads=4,
                                   n_layers=2, vocab_size=50, max_len=64)).eval()
    with torch.no_grad():                     # peaked attention: positions matter
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return model


IDS = torch.randint(0, 50, (2, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("method", [SelfExtend(5, 3), ReRoPE(6), LeakyReRoPE(6, leak=3.0),
                                    DualChunk(12, 3), StreamingLLM(2, 9)], ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cached_decoding_equals_full_forward(method, layout):
    model = _model(layout=layout)
    with torch.no_grad():
        plain = model(IDS)
        apply_region_method(model, method)
        full = model(IDS)
        stepped = decode_in_steps(model, IDS, 11)
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)
    assert (full - plain).abs().max() > 1e-2
    remove_region_method(model)
    with torch.no_grad():
        torch.testing.assert_close(model(IDS), plain, atol=0, rtol=0)


def test_the_method_is_a_declared_slot_not_a_replaced_forward():
    """A layer holds its method in its ``method`` slot and keeps its class's forward."""
    model = _model()
    layers = apply_region_method(model, ReRoPE(4))
    assert len(layers) == 2 and all(layer.method == ReRoPE(4) for layer in layers)
    assert all("forward" not in vars(layer) for layer in layers)
    remove_region_method(model)
    assert all(layer.method is None for layer in layers)


@pytest.mark.parametrize("method", [SelfExtend(5, 1), ReRoPE(T), DualChunk(T + 4, 4),
                                    StreamingLLM(2, T)], ids=str)
def test_degenerate_options_give_the_unpatched_model(method):
    model = _model()
    with torch.no_grad():
        plain = model(IDS)
        apply_region_method(model, method)
        torch.testing.assert_close(model(IDS), plain, atol=2e-5, rtol=1e-5)


def test_refusals():
    with pytest.raises(ValueError, match="need a rope encoding"):
        _call(_model("alibi"), ReRoPE(4))
    with pytest.raises(ValueError, match="need a rope encoding"):
        _call(_model(scaling={"rope_type": "dynamic", "factor": 2.0}), ReRoPE(4))
    model = _model()
    apply_region_method(model, ReRoPE(4))
    with pytest.raises(ValueError, match="already applied"):
        apply_region_method(model, ReRoPE(4))
    with torch.no_grad(), pytest.raises(ValueError, match="unpadded rows"):
        model(IDS, attention_mask=torch.ones(2, T, dtype=torch.long).index_fill_(1,
                                                                          torch.tensor([0]), 0))


def _call(model, method):
    apply_region_method(model, method)
    with torch.no_grad():
        model(IDS)


@pytest.mark.parametrize("options, message", [
    ({"temperature_floor": 4}, "temperature_floor=4"),
    ({"logn_base_len": 16}, "logn_base_len=16"),
    ({"scaling": {"rope_type": "yarn", "factor": 4.0}}, "without an attention factor"),
])
def test_refuses_a_rope_whose_logits_factor_the_remapping_would_drop(options, message):
    """A factor on the logits (temperature tuning, log-n, YaRN's) is not a rotation: the
    region scores would silently leave it out, so the encoding is refused."""
    from posenc.errors import UserError
    with pytest.raises(UserError, match=f"need a rope encoding.*{message}"):
        _call(_model(**options), ReRoPE(4))
    assert region_ready(_model(**options).pe) is not None
    _call(_model(), ReRoPE(4))                                        # plain RoPE is taken


def test_region_ready_answers_for_a_class_and_for_an_instance():
    from posenc.encodings import encoding_class
    assert region_ready(RotaryEncoding) is None and region_ready(_model().pe) is None
    for name in ("xpos", "mrope", "alibi"):
        assert "need a rope encoding (RoPE itself)" in region_ready(encoding_class(name))
    assert region_ready(_model(temperature_floor=4).pe) is not None


@pytest.mark.parametrize("options", [{"partial": 0.5},
                                     {"partial": 0.5, "layout": "interleaved"},
                                     {"partial": 0.75, "rotary_dim": 4}], ids=str)
def test_partial_rope_is_exact_under_region_methods(options):
    """p-RoPE's dropped frequencies are zeros, which the region tables rotate by nothing:
    without remapping the patched model equals the unpatched one, and with it cached
    decoding equals a full forward."""
    model = _model(**options)
    assert (model.pe.inv_freq == 0).any()
    with torch.no_grad():
        plain = model(IDS)
        apply_region_method(model, SelfExtend(5, 1))                   # no remapping
        torch.testing.assert_close(model(IDS), plain, atol=2e-5, rtol=1e-5)
        remove_region_method(model)
        apply_region_method(model, SelfExtend(5, 3))
        full = model(IDS)
        stepped = decode_in_steps(model, IDS, 11)
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)
    assert (full - plain).abs().max() > 1e-2


@pytest.mark.parametrize("config", [{"plan": {"name": "gemma3", "window": 4, "every": 2}},
                                    {"attn_sinks": True}], ids=["window", "sinks"])
def test_refuses_layers_with_a_window_or_sinks_and_patches_none(config):
    """The region scores have no window mask and no sink logit, which they would drop."""
    model = TransformerLM(LMConfig(pe="rope", d_model=32, n_heads=4, n_layers=2,
                                   vocab_size=50, max_len=64, **config))
    with pytest.raises(ValueError, match="without a window or sinks"):
        apply_region_method(model, SelfExtend(5, 3))
    assert not any(hasattr(m, "_region_method") for m in model.modules())
