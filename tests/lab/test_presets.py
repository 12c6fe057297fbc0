"""Comparison presets: options that follow the model size, config validation and the nested
form (options by short or dotted name, round trips)."""

import json
from dataclasses import replace

import pytest

from posenc.lab.presets import PRESETS, CompareConfig


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
