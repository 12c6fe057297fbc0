"""Differences of settings in one line, and the refusal of a rerun that did not ask to resume."""

from __future__ import annotations

import pytest

from posenc.errors import UserError
from posenc.study import CLI_NAMES
from posenc.study.settings import require_resume, settings_difference, short


def test_differences_name_each_key_with_both_values():
    assert settings_difference({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3], "c": "x"}) == \
        'b [1, 2] there, [1, 3] now; c null there, "x" now'
    assert settings_difference({"a": 1}, {"a": 1}) is None
    assert settings_difference(None, {"a": 1}) == "it records no settings"
    assert settings_difference(None, {}, "older") == "older"


def test_long_values_are_cut():
    assert short("x" * 100) == '"' + "x" * 36 + "..."
    assert len(short(list(range(100)))) == 40


def test_a_rerun_must_ask_to_resume_or_start_again():
    require_resume(None, False, "toy study", CLI_NAMES | {"resume": "--resume"})
    require_resume({"x": 1}, True, "toy study", {"resume": "r", "overwrite": "o"})
    with pytest.raises(UserError, match="holds a toy study; pass --resume to continue it or "
                                        "--overwrite to start again"):
        require_resume({"x": 1}, False, "toy study", CLI_NAMES | {"resume": "--resume"})
