"""Comparison presets: options that follow the model size, and config validation."""

from dataclasses import replace

import pytest

from posenc.lab.presets import PRESETS, CompareConfig


def test_options_follow_the_model_size():
    cfg = replace(PRESETS["default"], d_model=64, train_len=64)
    assert cfg.options_for("sinusoidal") == {"scale": 0.125}
    assert cfg.options_for("t5") == {"max_distance": 64}
    assert replace(cfg, train_len=16).options_for("t5") == {"max_distance": 32}
    assert replace(cfg, train_len=512).options_for("t5") == {}
    given = replace(cfg, pe_options={"t5": {"max_distance": 256}, "sinusoidal": {"scale": 1}})
    assert given.options_for("t5") == {"max_distance": 256}
    assert given.options_for("sinusoidal") == {"scale": 1}


@pytest.mark.parametrize("bad", ["train_len", "encodings", "seeds"])
def test_compare_config_validates(bad):
    value = {"train_len": 1, "encodings": ("warp",), "seeds": 0}[bad]
    with pytest.raises(ValueError, match=bad):
        CompareConfig(**{bad: value})
