"""The registry of study kinds: one kind per name."""

from __future__ import annotations

import pytest

from posenc.study import StudyKind, register_kind, registered_kinds


def test_a_kind_registers_once_and_a_second_of_its_name_is_refused():
    kind = StudyKind("toy-registry", 1, "posenc toy", ("results.json",))
    assert register_kind(kind) is kind and register_kind(kind) is kind
    assert [k for k in registered_kinds() if k.name == "toy-registry"] == [kind]
    with pytest.raises(ValueError, match="two study kinds are named 'toy-registry'"):
        register_kind(StudyKind("toy-registry", 2, "posenc other", ("results.json",)))

