"""Inference-time RoPE scalings of a trained model: only past the training length,
combined and parsed, refused for other encodings."""

import pytest
import torch

from posenc.eval.inference_scaling import InferenceScaling, apply_inference_scaling
from tests.eval.helpers import stream, tiny


def test_inference_scaling_changes_rope_only_past_the_training_length():
    model, ids = tiny("rope"), stream(64)[None]
    with torch.no_grad():
        base = model(ids)
        for spec in ("yarn:4", "ntk:4", "linear:4", "dynamic", "logn"):
            scaled = apply_inference_scaling(model, InferenceScaling.parse(spec), 16)
            out = scaled(ids)
            assert not torch.allclose(out, base), spec
            if spec in ("dynamic", "logn"):    # both equal plain RoPE within the training length
                torch.testing.assert_close(scaled(ids[:, :16]), base[:, :16])
    assert model.config.pe_options == {}                      # the original is untouched


def test_inference_scaling_combines_and_round_trips():
    s = InferenceScaling.parse("yarn:4+logn")
    assert (s.rope_scaling, s.logn, s.label) == ("yarn:4", True, "yarn:4+logn")
    scaled = apply_inference_scaling(tiny("rope"), s, 16)
    assert scaled.config.pe_options["logn_base_len"] == 16
    assert scaled.config.pe_options["scaling"]["original_max_position_embeddings"] == 16
    with pytest.raises(ValueError, match="unknown method"):
        InferenceScaling.parse("warp:4")


def test_inference_scaling_refuses_non_rope():
    with pytest.raises(ValueError, match="needs a RoPE run.*'alibi'"):
        apply_inference_scaling(tiny("alibi"), InferenceScaling("yarn:4"), 16)
    trained_scaled = tiny("rope", scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="trained with scaling"):
        apply_inference_scaling(trained_scaled, InferenceScaling("ntk:4"), 16)


@pytest.mark.parametrize("encoding", __import__("posenc").list_encodings())
def test_every_scaling_an_encoding_accepts_applies_to_its_model(encoding):
    """What a comparison plans (accepts_rope_scaling) is what the model then takes: an
    encoding never accepts a scaling it refuses when applied (M-RoPE and dynamic NTK)."""
    from posenc import LMConfig, TransformerLM
    from posenc.eval.inference_scaling import accepts_rope_scaling
    from posenc.lab.compare.presets import DEFAULT_SCALINGS
    scalings = (*DEFAULT_SCALINGS, "dynamic+logn")
    model = TransformerLM(LMConfig(pe=encoding, d_model=16, n_heads=2, n_layers=1,
                                   max_len=16))
    for spec in scalings:
        if accepts_rope_scaling(encoding, spec):
            apply_inference_scaling(model, InferenceScaling.parse(spec), 16)
        elif accepts_rope_scaling(encoding):
            with pytest.raises(ValueError):
                apply_inference_scaling(model, InferenceScaling.parse(spec), 16)


def test_mrope_takes_no_length_dependent_scaling():
    from posenc.eval.inference_scaling import accepts_rope_scaling
    assert accepts_rope_scaling("rope", "dynamic") and accepts_rope_scaling("mrope", "yarn:4")
    assert not accepts_rope_scaling("mrope", "dynamic")
    assert not accepts_rope_scaling("mrope", "dynamic+logn")
    assert accepts_rope_scaling("mrope", "logn") and not accepts_rope_scaling("alibi")


def test_region_methods_equal_plain_rope_where_every_key_keeps_its_position():
    """Inside its neighbour window a region method scores every pair at its true distance,
    so on a sequence shorter than the window the patched model equals plain RoPE; past it
    the positions are remapped and the logits differ. The original model is untouched."""
    model, ids = tiny("rope"), stream(64)[None]
    with torch.no_grad():
        base = model(ids)
        for spec, window in (("self_extend:4", 12), ("rerope", 12), ("leaky_rerope:4", 12)):
            name = spec.partition(":")[0]
            scaled = apply_inference_scaling(model, InferenceScaling.parse(spec), 48)
            torch.testing.assert_close(scaled(ids[:, :window]), base[:, :window])
            assert not torch.allclose(scaled(ids), base), name
        for spec in ("dual_chunk", "streaming"):       # chunk 36 / window 44 of 48
            scaled = apply_inference_scaling(model, InferenceScaling.parse(spec), 48)
            torch.testing.assert_close(scaled(ids[:, :36]), base[:, :36])
            assert not torch.allclose(scaled(ids), base), spec
    assert not any(getattr(m, "method", None) for m in model.modules())


@pytest.mark.parametrize("label, message", [
    ("self_extend:4+logn", "goes alone"), ("yarn:4+rerope", "names two methods"),
    ("rerope:4", "takes no factor"), ("self_extend:0.5", "needs factor >= 1"),
    ("self_extend:x", "not a number"), ("dual_chunk:2", "takes no factor")])
def test_region_method_labels_refuse_bad_input(label, message):
    with pytest.raises(ValueError, match=message):
        InferenceScaling.parse(label)


def test_region_method_labels_round_trip_and_need_plain_rope():
    from posenc.eval.inference_scaling import accepts_rope_scaling, has_attention_weights
    for label in ("self_extend:4", "rerope", "leaky_rerope:2.5", "dual_chunk", "streaming"):
        parsed = InferenceScaling.parse(label)
        assert (parsed.region, parsed.label, parsed.rope_scaling, parsed.logn) == (
            label, label, None, False)
        assert not has_attention_weights(label)
    assert has_attention_weights("yarn:4+logn") and has_attention_weights(None)
    assert accepts_rope_scaling("rope", "rerope")
    assert not accepts_rope_scaling("xpos", "rerope")       # decays: not plain RoPE
    assert not accepts_rope_scaling("alibi", "self_extend:4")
    with pytest.raises(ValueError, match="needs a plain rope run"):
        apply_inference_scaling(tiny("xpos"), InferenceScaling.parse("rerope"), 16)


def test_region_methods_refuse_a_rope_run_with_a_query_position_factor():
    """``rope`` takes region methods (accepts_rope_scaling asks the class), but a run whose
    options add a logits factor of the query's position is refused when it is applied,
    before any forward pass; a plan's non-RoPE layer types too."""
    from posenc.eval.inference_scaling import accepts_rope_scaling
    assert accepts_rope_scaling("rope", "self_extend:4")
    for options in ({"temperature_floor": 4}, {"logn_base_len": 8}):
        with pytest.raises(ValueError, match="region method 'rerope': .*query's position"):
            apply_inference_scaling(tiny("rope", **options), InferenceScaling.parse("rerope"),
                                    16)
    from dataclasses import replace

    from posenc import TransformerLM
    mixed = TransformerLM(replace(tiny("rope").config, plan={"layers": ["rope", "nope"],
                                                            "types": {}}))
    with pytest.raises(ValueError, match="need a rope encoding \\(RoPE itself\\), got nope"):
        apply_inference_scaling(mixed, InferenceScaling.parse("rerope"), 16)


def test_a_frequency_method_without_its_factor_shows_the_form():
    with pytest.raises(ValueError, match="method 'yarn' needs a factor .*e.g. 'yarn:4'"):
        InferenceScaling.parse("yarn")
    with pytest.raises(ValueError, match="e.g. 'linear:4'"):
        InferenceScaling("linear")
    assert InferenceScaling.parse("dynamic").rope_scaling == "dynamic"   # factor 1 allowed
