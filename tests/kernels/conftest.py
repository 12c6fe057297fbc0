"""Fixtures that put a test on a native kernel (tests/kernels/native.py says when it may skip).
They clear ``POSENC_NATIVE_KERNELS`` for the test: the switch chooses paths for users, and a
kernel test is about the kernel."""

from __future__ import annotations

import pytest

from posenc.kernels import build as native_build
from posenc.kernels.pairs import native_pair_status
from posenc.kernels.rotary import native_rotary_status
from tests.kernels.native import require_native


@pytest.fixture
def native_rotary(monkeypatch):
    """The rotary kernel, built."""
    monkeypatch.delenv("POSENC_NATIVE_KERNELS", raising=False)
    require_native(native_rotary_status())


@pytest.fixture
def native_pairs(monkeypatch):
    """The pair kernels, built; they run only on torch's own OpenMP workers, so elsewhere
    the test skips with the reason (tests/kernels/test_build.py builds them anyway)."""
    monkeypatch.delenv("POSENC_NATIVE_KERNELS", raising=False)
    openmp, why = native_build.openmp_decision()
    if not openmp:
        pytest.skip(f"the pair kernels are not used here: {why}")
    require_native(native_pair_status())
