"""pyproject.toml uses the current metadata forms (no setuptools deprecation warning on
install): the license is an SPDX expression, which needs setuptools >= 77 to build."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_license_is_an_spdx_string_and_setuptools_is_new_enough_for_it():
    data = tomllib.loads(PYPROJECT.read_text())
    assert data["project"]["license"] == "MIT"
    assert not any(c.startswith("License ::") for c in data["project"].get("classifiers", []))
    requires = data["build-system"]["requires"]
    setuptools = [r for r in requires if r.startswith("setuptools")]
    assert setuptools == ["setuptools>=77"]
