"""Differences of settings in one line."""

from __future__ import annotations

from posenc.study.settings import settings_difference, short


def test_differences_name_each_key_with_both_values():
    assert settings_difference({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3], "c": "x"}) == \
        'b [1, 2] there, [1, 3] now; c null there, "x" now'
    assert settings_difference({"a": 1}, {"a": 1}) is None
    assert settings_difference(None, {"a": 1}) == "it records no settings"
    assert settings_difference(None, {}, "older") == "older"


def test_long_values_are_cut():
    assert short("x" * 100) == '"' + "x" * 36 + "..."
    assert len(short(list(range(100)))) == 40

