"""When a native kernel test may skip: only where no C compiler exists. Where one exists and
the kernel does not build, the test fails with the compiler's messages."""

from __future__ import annotations

import pytest

from posenc.kernels import build as native_build


def require_native(status: str) -> None:
    """Return if ``status`` (a kernel's ``status()``) is "ready"; else skip where no C
    compiler exists, fail with the status (the compiler's messages) where one does."""
    if status == "ready":
        return
    if not native_build.have_compiler():
        pytest.skip(f"no C compiler, so no native kernel ({status})")
    pytest.fail(f"a C compiler exists but the kernel is not available: {status}",
                pytrace=False)
