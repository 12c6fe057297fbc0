"""Comparison presets: options that follow the model size, config validation, the nested
form (options by short or dotted name, round trips, older flat configs migrated) and which
settings make runs incomparable."""

import json
from dataclasses import replace

import pytest

from posenc.lab.presets import PRESETS, CompareConfig, incomparable_reason, migrate_config


def test_options_follow_the_model_size():
    cfg = PRESETS["default"].with_options(d_model=64, train_len=64)
    assert cfg.options_for("sinusoidal") == {"scale": 0.125}
    assert cfg.options_for("t5") == {"max_distance": 64}
    assert cfg.with_options(train_len=16).options_for("t5") == {"max_distance": 32}
    assert cfg.with_options(train_len=512).options_for("t5") == {}
    given = replace(cfg, pe_options={"t5": {"max_distance": 256}, "sinusoidal": {"scale": 1}})
    assert given.options_for("t5") == {"max_distance": 256}
    assert given.options_for("sinusoidal") == {"scale": 1}


@pytest.mark.parametrize("bad", ["train_len", "encodings", "seeds"])
def test_compare_config_validates(bad):
    value = {"train_len": 1, "encodings": ("warp",), "seeds": 0}[bad]
    with pytest.raises(ValueError, match=bad):
        CompareConfig().with_options(**{bad: value})


#: the config block of a results.json written before training and model settings were
#: nested (``posenc compare --preset smoke``)
FLAT_SMOKE = {
    "preset": "smoke", "encodings": ["rope", "alibi"], "train_len": 16, "steps": 20,
    "batch_size": 8, "lr": 0.003, "warmup_steps": None, "weight_decay": 0.1, "grad_clip": 1.0,
    "seed": 0, "seeds": 1, "bf16": False, "d_model": 32, "n_layers": 1, "n_heads": 2,
    "data": None, "tokenizer": "byte", "lengths": [16, 32, 64, 128, 256],
    "length_multipliers": [1, 2, 4, 8, 16], "eval_tokens": 512, "stride": None,
    "scalings": ["linear:4", "ntk:4", "dynamic", "yarn:4", "logn"], "entropy_max_len": 64,
    "entropy_windows": 1, "timing_rounds": 5, "pe_options": {}}


def test_a_flat_config_of_older_results_migrates_to_the_nested_form():
    nested = migrate_config(FLAT_SMOKE)
    then = replace(PRESETS["smoke"], scalings=tuple(FLAT_SMOKE["scalings"]))  # fewer then
    assert nested == then.to_dict()
    assert migrate_config(nested) is nested
    assert incomparable_reason(FLAT_SMOKE, PRESETS["smoke"]) is None
    assert "train.steps is 20 there but 21 now" == incomparable_reason(
        FLAT_SMOKE, PRESETS["smoke"].with_options(steps=21))
    cfg = CompareConfig.from_dict(FLAT_SMOKE)
    assert cfg.train == PRESETS["smoke"].train and cfg.model.d_model == 32


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_to_dict_and_from_dict_round_trip(name):
    data = PRESETS[name].to_dict()
    assert set(data["train"]) >= {"model", "lr", "betas", "steps"}
    assert json.loads(json.dumps(data)) == data
    assert CompareConfig.from_dict(data).to_dict() == data


def test_options_map_onto_the_nested_fields():
    cfg = PRESETS["smoke"].with_options(steps=7, d_model=64, **{"train.lr": 1e-3,
                                                                 "model.n_layers": 3})
    assert (cfg.train.steps, cfg.train.lr, cfg.model.d_model, cfg.model.n_layers) == (
        7, 1e-3, 64, 3)
    assert cfg.with_options(train_len=32).model.max_len == 32     # the training length
    per_run = cfg.train_config("alibi", vocab_size=300, seed=4)
    assert (per_run.model.pe, per_run.model.vocab_size, per_run.seed) == ("alibi", 300, 4)
    assert per_run.checkpoint_every == 1 and per_run.model.d_model == 64
    with pytest.raises(ValueError, match=r"unknown compare option\(s\) model.pe; valid"):
        cfg.with_options(**{"model.pe": "nope"})


def test_the_device_does_not_make_runs_incomparable():
    old = PRESETS["smoke"].with_options(device="cpu").to_dict()
    assert incomparable_reason(old, PRESETS["smoke"].with_options(device="cuda")) is None
    assert "train.bf16" in incomparable_reason(old, PRESETS["smoke"].with_options(bf16=True))
