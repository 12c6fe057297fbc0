"""The method registry: every method declares what the commands read, checked by rule."""

from __future__ import annotations

import re

import pytest

from posenc.errors import UserError
from posenc.methods import (
    ExtensionMethod,
    build_method,
    describe_methods,
    list_methods,
    method_class,
    register_method,
    unregister_method,
)
from posenc.methods.base import FACTOR_RULES, KINDS


@pytest.mark.parametrize("name", list_methods())
def test_every_method_declares_its_kind_factor_rule_and_source(name):
    cls = method_class(name)
    assert cls.name == name and cls.kind in KINDS and cls.factor_rule in FACTOR_RULES
    if name != "none":
        assert re.search(r"\b(19|20)\d\d\b", str(cls.citation)), name
        assert cls.summary
    names = cls.option_names()
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("name", list_methods("region"))
def test_every_region_method_builds_from_defaults_alone(name):
    """Each option that has a default gives a method object for any original context;
    the defaults keep the longest relative position inside the original context."""
    for original, factor in ((32, 4.0), (257, 2.5), (4096, 8.0)):
        method = build_method(name, original, factor)
        assert method.longest_relative(int(original * factor)) <= original - 1, (name, original)


def test_the_kinds_are_grouped_and_each_group_sorted():
    names = list_methods()
    assert names[0] == "none"
    kinds = [method_class(n).kind for n in names]
    assert kinds == sorted(kinds, key=KINDS.index)
    for kind in KINDS:
        group = list_methods(kind)
        assert group == sorted(group)


@pytest.mark.parametrize("name, factor, message", [
    ("linear", 1.0, "needs factor > 1"), ("linear", None, "needs a factor"),
    ("dynamic", 0.5, "needs factor >= 1"), ("none", 2.0, "takes no factor"),
    ("yarn", float("inf"), "finite number"), ("yarn", True, "finite number"),
    ("ntk", 1e308, "up to 1e\\+06")])
def test_factor_rules(name, factor, message):
    with pytest.raises(UserError, match=message):
        method_class(name).check_factor(factor)


def test_defaults_unknown_and_required_options():
    assert method_class("dynamic").check_factor(None) == 1.0
    llama3 = method_class("llama3")
    assert llama3.resolve_options(8192, 8.0, {}) == {"low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0}
    assert method_class("dynamic").resolve_options(64, 2.0, {}, hf=True) == {
        "schedule": "per_token"}                          # Hugging Face's behaviour
    assert method_class("dynamic").resolve_options(64, 2.0, {}) == {}
    with pytest.raises(UserError, match=r"unknown option\(s\) beta \(did you mean "
                                        r"'beta_(fast|slow)'\?\) for method 'yarn'; valid"):
        method_class("yarn").resolve_options(64, 2.0, {"beta": 1})
    with pytest.raises(UserError, match="needs option 'long_factor'"):
        method_class("longrope").resolve_options(64, 2.0, {})
    se = build_method("self_extend", 4096, 4.0, window=512)
    assert (se.window, se.group) == (512, 5)             # group from the given window


def test_unknown_names_get_a_suggestion():
    with pytest.raises(UserError, match="unknown extension method 'self_extnd' .*did you "
                                        "mean 'self_extend'"):
        method_class("self_extnd")
    with pytest.raises(UserError, match="did you mean 'yarn'\\? names are case-sensitive"):
        method_class("YaRN")
    with pytest.raises(UserError, match="region methods: dual_chunk"):
        build_method("yarn", 64, 2.0)


def test_register_refuses_a_nameless_or_twice_registered_method():
    class Nameless(ExtensionMethod):
        pass
    with pytest.raises(ValueError, match="needs a name"):
        register_method(Nameless)

    class Twin(ExtensionMethod):
        name = "yarn"
    with pytest.raises(ValueError, match="registered twice"):
        register_method(Twin)

    class Odd(ExtensionMethod):
        name = "odd_kind_method"
        kind = "magic"
    try:
        with pytest.raises(ValueError, match="kind must be one of"):
            register_method(Odd)
    finally:
        unregister_method("odd_kind_method")
    assert "odd_kind_method" not in list_methods()


def test_describe_rows_say_what_a_config_and_gguf_can_hold():
    rows = {r["name"]: r for r in describe_methods()}
    assert rows["yarn"]["hf_config"] and rows["yarn"]["gguf"]
    assert not rows["dynamic"]["gguf"] and rows["dynamic"]["hf_config"]
    assert not rows["self_extend"]["hf_config"] and not rows["self_extend"]["gguf"]
    assert rows["self_extend"]["options"] == ["window", "group"]
    assert "Jin et al. 2024" in rows["self_extend"]["source"]
