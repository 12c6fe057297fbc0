"""Lab variants: p-RoPE and the named layer plans as runs of a comparison, with the plan's
cycle fitted to the model's depth, no inference-time scalings, and clear refusals."""

import pytest

from posenc.lab.compare.presets import PRESETS, CompareConfig, preset
from posenc.lab.compare.study import planned_runs
from posenc.lab.runs.variants import VARIANTS, lab_run_names, run_family, variant_plan


def two_layers(*encodings):
    return CompareConfig(encodings=encodings).with_options(n_layers=2, d_model=32, n_heads=2,
                                                           train_len=16)


def test_variants_train_their_encoding_options_and_plan():
    cfg = two_layers("rope", "p_rope", "smollm3_plan", "gemma3_plan", "llama4_plan")
    p_rope = cfg.train_config("p_rope", 256).model
    assert (p_rope.pe, p_rope.pe_options, p_rope.plan) == ("rope", {"partial": 0.75}, None)
    smol = cfg.train_config("smollm3_plan", 256).model
    assert [s.pe for s in smol.layer_specs()] == ["rope", "nope"]       # NoPE closes it
    gemma = cfg.train_config("gemma3_plan", 256).model.layer_specs()
    assert gemma[0].window is not None and gemma[1].window is None
    assert (gemma[0].pe_options["theta"], gemma[1].pe_options["theta"]) == (1e4, 1e6)
    llama = cfg.train_config("llama4_plan", 256).model.layer_specs()
    assert llama[0].window.kind == "chunked" and llama[1].pe == "nope"
    assert "temperature_floor" in llama[1].pe_options


def test_a_plan_keeps_its_own_cycle_in_a_deep_model():
    assert variant_plan("smollm3_plan", 8) == {"name": "smollm3", "every": 4}
    assert variant_plan("gemma3_plan", 12) == {"name": "gemma3", "every": 6}
    assert variant_plan("gemma3_plan", 3) == {"name": "gemma3", "every": 3}
    assert variant_plan("p_rope", 1) is None


def test_variants_take_no_inference_scaling_and_join_the_catalogue_presets():
    plan = planned_runs(two_layers("rope", "p_rope", "smollm3_plan"))
    assert ("rope", "yarn:4") in plan and ("rope", "rerope") in plan
    assert [s for e, s in plan if e != "rope"] == [None, None]
    assert set(VARIANTS) <= set(preset("default").encodings)
    assert lab_run_names()[-len(VARIANTS):] == list(VARIANTS)
    assert run_family("smollm3_plan") == "plan" and run_family("p_rope") == "rotary"
    assert run_family("alibi") == "bias"


def test_bad_variant_settings_are_refused_in_one_line():
    with pytest.raises(ValueError, match="gemma3_plan needs a model of at least 2 layers"):
        CompareConfig(encodings=("gemma3_plan",)).with_options(n_layers=1)
    with pytest.raises(ValueError, match="lab variants: p_rope"):
        CompareConfig(encodings=("q_rope",))
    assert PRESETS["default"].model.n_layers >= 2          # the default runs every variant


def test_drope_trains_rope_for_three_quarters_of_the_steps_then_none():
    cfg = two_layers("rope", "drope").with_options(steps=400)
    drope = cfg.train_config("drope", 256)
    assert (drope.model.pe, drope.scaffold_pe, drope.scaffold_steps) == ("nope", "rope", 300)
    assert cfg.train_config("rope", 256).scaffold_pe is None
    assert run_family("drope") == "rotary"
    assert [s for e, s in planned_runs(cfg) if e == "drope"] == [None]
    with pytest.raises(ValueError, match="drope .* needs at least 2 steps"):
        two_layers("drope").with_options(steps=1).train_config("drope", 256)


def test_stick_breaking_trains_nope_with_stick_breaking_attention():
    cfg = two_layers("alibi", "stick_breaking")
    model = cfg.train_config("stick_breaking", 256).model
    assert (model.pe, model.attn_form, model.plan) == ("nope", "stick_breaking", None)
    assert cfg.train_config("alibi", 256).model.attn_form == "softmax"
    assert run_family("stick_breaking") == "bias"       # drawn beside ALiBi and the biases
    with pytest.raises(ValueError, match="unknown compare option"):
        cfg.with_options(attn_form="stick_breaking")    # a run's form, not the study's
