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
    with pytest.raises(ValueError, match="unknown scaling"):
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
    scalings = ("linear:4", "ntk:4", "dynamic", "yarn:4", "logn", "dynamic+logn")
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
