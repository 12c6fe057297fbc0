"""Build a small C kernel once with the system compiler, cache it, load it with ctypes.

The shared object is keyed by a hash of the source, compiler, flags and machine, cached in
posenc's cache folder (:func:`posenc.paths.cache_dir`; a private temporary directory if that
is not writable), and written atomically, so concurrent processes never load a half-written
file.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from .. import paths


def find_compiler() -> str:
    """``$CC``, else ``cc`` or ``gcc`` on the PATH; RuntimeError if none."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler found (set CC)")
    return compiler


def compiler_flags() -> list[str]:
    """Optimized, position-independent, no fused multiply-add (results equal plain torch
    ops); AVX2 where torch's CPU capability has it."""
    flags = ["-O3", "-shared", "-fPIC", "-pthread", "-std=c99", "-ffp-contract=off"]
    if platform.machine().lower() in ("x86_64", "amd64") and \
            torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags.append("-mavx2")
    return flags


def openmp_runtime_loaded() -> bool:
    """Whether torch runs its intra-op threads on GNU OpenMP (libgomp.so.1) in this process:
    a kernel built with -fopenmp then binds to that same runtime and its threads."""
    try:
        with open("/proc/self/maps") as maps:
            return any(line.rstrip().endswith("/libgomp.so.1") for line in maps)
    except OSError:
        return False


def build_dir() -> Path:
    """posenc's cache folder if it is writable, else a new temporary folder private to this
    process."""
    try:
        path = paths.cache_dir()
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="posenc-"))


def compile_and_load(source: str, name: str, compiler: str, flags: list[str]) -> ctypes.CDLL:
    """The library built from ``source`` (C) with ``flags``; RuntimeError if it fails."""
    key = hashlib.sha256("\0".join([source, compiler, *flags,
                                    platform.machine()]).encode()).hexdigest()[:16]
    target = build_dir() / f"{name}_{key}.so"
    if not target.exists():
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            path = Path(tmp) / f"{name}.c"
            path.write_text(source)
            built = Path(tmp) / target.name
            try:
                proc = subprocess.run([compiler, *flags, str(path), "-o", str(built)],
                                      capture_output=True, text=True, timeout=120,
                                      check=False)
            except (OSError, subprocess.SubprocessError) as err:
                raise RuntimeError(f"{compiler} could not run: {err}") from err
            if proc.returncode != 0:
                raise RuntimeError(f"{compiler} failed: {proc.stderr.strip()[-500:]}")
            os.replace(built, target)                                # atomic
    return ctypes.CDLL(str(target))


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def plain_eager(*tensors) -> bool:
    """Whether a native kernel may read these tensors' memory: plain tensors (no subclass,
    fake or vmap/torch.func wrapper), outside torch.compile, tracing and scripting."""
    if any(type(t) not in _PLAIN for t in tensors):
        return False                                   # tensor subclasses, fake tensors
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting():
        return False
    return not any(_is_wrapped(t) for t in tensors)    # vmap, torch.func.grad


def native_enabled() -> bool:
    """False when ``POSENC_NATIVE_KERNELS=0`` asks for the reference paths."""
    return os.environ.get("POSENC_NATIVE_KERNELS", "1") != "0"


class LazyKernel:
    """A native library built on first use by ``build`` (a callable returning the loaded
    library, raising OSError/RuntimeError/SubprocessError if it cannot), at most once per
    process and thread-safely. ``state`` holds "lib", or "error": why there is none."""

    def __init__(self, what: str, build) -> None:
        self.what, self.build = what, build
        self.lock = threading.Lock()
        self.state: dict[str, object] = {}

    def load(self):
        """The loaded library, or None (the reason is kept in ``state``)."""
        if "lib" in self.state or "error" in self.state:
            return self.state.get("lib")
        with self.lock:
            if "lib" not in self.state and "error" not in self.state:
                try:
                    self.state["lib"] = self.build()
                except (OSError, RuntimeError, subprocess.SubprocessError) as err:
                    self.state["error"] = f"native {self.what} kernel unavailable: {err}"
        return self.state.get("lib")

    def status(self) -> str:
        """"ready", "disabled" (POSENC_NATIVE_KERNELS=0) or why the kernel is unavailable.
        Builds the kernel on first use."""
        if not native_enabled():
            return "disabled"
        self.load()
        return "ready" if "lib" in self.state else str(self.state["error"])
