"""One grammar for a method: NAME[:FACTOR][+ADDON...], parsed once for every command."""

from __future__ import annotations

import pytest

from posenc.errors import UserError
from posenc.methods import MethodSpec, format_factor, parse_method_spec


@pytest.mark.parametrize("text, spec", [
    ("yarn:4", MethodSpec("yarn", 4.0)),
    ("yarn:4+logn", MethodSpec("yarn", 4.0, logn=True)),
    ("logn", MethodSpec("none", None, logn=True)),
    ("dynamic", MethodSpec("dynamic")),
    ("dynamic+exact", MethodSpec("dynamic", exact=True)),
    ("dynamic:2+logn+exact", MethodSpec("dynamic", 2.0, logn=True, exact=True)),
    ("self_extend:4", MethodSpec("self_extend", 4.0)),
    ("leaky_rerope:2.5", MethodSpec("leaky_rerope", 2.5)),
    ("rerope", MethodSpec("rerope")),
    ("none", MethodSpec("none")),
    ("ntk+logn", MethodSpec("ntk", None, logn=True))])
def test_specs_parse_and_round_trip(text, spec):
    assert parse_method_spec(text) == spec
    assert parse_method_spec(spec.label) == spec
    assert spec.label == text


def test_logn_first_is_the_same_spec_written_canonically():
    assert parse_method_spec("logn+yarn:4").label == "yarn:4+logn"
    assert format_factor(4.0) == "4" and format_factor(2.5) == "2.5"


@pytest.mark.parametrize("text, message", [
    ("", "a method must be a name"), ("rerop", "unknown method 'rerop'.*did you mean 'rerope'"),
    ("Yarn:4", "names are case-sensitive"), ("yarn+logn+logn", "repeats the add-on 'logn'"),
    ("yarn:4+ntk:4", "names two methods"), ("rerope:4", "takes no factor"),
    ("yarn:x", "not a number"), ("yarn:1e308", "finite number in"), ("yarn:nan", "finite"),
    ("linear:1", "needs factor > 1"), ("self_extend:4+logn", "goes alone"),
    ("yarn:4+exact", "follow the length"), ("yarn+warp", "unknown method 'warp'")])
def test_bad_specs_are_one_line_errors(text, message):
    with pytest.raises(UserError, match=message):
        parse_method_spec(text)


def test_flags_are_the_keyword_add_ons():
    assert parse_method_spec("dynamic+logn+exact").flags() == {"logn": True,
                                                               "exact_cache": True}
    assert parse_method_spec("yarn").flags() == {}
