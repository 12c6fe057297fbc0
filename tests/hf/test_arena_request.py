"""What ``posenc arena`` is asked: the presets and their overrides, the setting without
RULER's keys when no RULER task runs."""

from __future__ import annotations

import pytest

from posenc.errors import UserError
from posenc.hf.arena_request import CPU_METHODS, PRESETS, RULER_KEYS, preset_request


def test_a_preset_is_its_fields_with_the_overrides_given_and_none_left_out():
    cpu = preset_request("cpu", factor=None, needles=3)
    assert cpu.methods == CPU_METHODS and cpu.needles == 3 and cpu.factor == 4.0
    assert cpu.tasks == PRESETS["cpu"]["tasks"]
    gpu = preset_request("gpu", methods=("none", "yarn"))
    assert gpu.methods == ("none", "yarn") and gpu.original is None


def test_an_unknown_preset_names_the_valid_ones():
    with pytest.raises(UserError, match="unknown preset 'huge'; valid presets: cpu, gpu"):
        preset_request("huge")


def test_without_ruler_tasks_the_setting_has_no_ruler_keys():
    assert not set(RULER_KEYS) & set(preset_request("cpu", tasks=()).setting())
    assert set(RULER_KEYS) <= set(preset_request("cpu").setting())
