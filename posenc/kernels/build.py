"""Build a native kernel once with the system C compiler, cache it, load it with ctypes.

The C sources ship with the package as data files (``posenc/kernels/csrc/*.c``, read by
:func:`kernel_source`). A shared object is keyed by a hash of the source bytes, the compiler
(its path and ``--version`` line), the flags and the machine, cached in posenc's cache
folder (:func:`posenc.paths.cache_dir`; a private temporary directory if that is not
writable), and moved into place atomically (built in a temporary folder beside it, then
``os.replace``), so concurrent processes never load a half-written file.

Why ctypes and not ``torch.utils.cpp_extension.load``: the kernels are plain C functions
taking addresses and sizes, so ``cc`` builds each in about a second and needs no C++
toolchain, no ninja and no torch headers, where a C++ extension compiles against torch's
headers (tens of seconds per build, a C++ compiler matching torch's ABI). What an extension
would add, operators that torch.compile can trace, can be registered from Python with
``torch.library``.

Threads (:func:`openmp_decision`): where torch runs its intra-op threads on GNU OpenMP and
that runtime is loaded under the soname gcc's ``-fopenmp`` links (``libgomp.so.1``), a kernel
is built with ``-fopenmp`` and binds to that same runtime, so its parallel regions run on
torch's own worker threads; threads of its own would compete with them (still spinning after
the previous op) for the cores. Both facts are asked portably: the parallel backend from
``torch.__config__.parallel_info()``, the runtime from the dynamic loader (``dlopen`` with
``RTLD_NOLOAD``, which loads nothing). Wherever either cannot be established (torch on its
native pool or TBB, LLVM's libomp on macOS, a renamed libgomp copy in ``torch.libs``, no
``RTLD_NOLOAD``) kernels use POSIX threads.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path

import torch

from .. import paths

#: the OpenMP runtime gcc's -fopenmp links, by soname
GNU_OPENMP = "libgomp.so.1"


def kernel_source(name: str) -> str:
    """The C source ``csrc/<name>.c`` shipped with the package."""
    return (resources.files(__package__) / "csrc" / f"{name}.c").read_text()


def find_compiler() -> str:
    """``$CC`` (a name on the PATH or a path), else ``cc`` or ``gcc`` on the PATH.

    RuntimeError (starting "no C compiler") if there is none."""
    named = os.environ.get("CC")
    if named:
        found = shutil.which(named)
        if not found:
            raise RuntimeError(f"no C compiler: CC={named!r} is not an executable")
        return found
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler found (no cc or gcc on the PATH; set CC)")
    return compiler


def have_compiler() -> bool:
    """Whether :func:`find_compiler` finds one."""
    try:
        find_compiler()
    except RuntimeError:
        return False
    return True


@functools.lru_cache(maxsize=8)
def compiler_version(compiler: str) -> str:
    """The first line of ``compiler --version`` (part of the cache key)."""
    try:
        proc = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        raise RuntimeError(f"{compiler} could not run: {err}") from err
    return (proc.stdout or proc.stderr).strip().split("\n")[0]


def compiler_flags() -> list[str]:
    """Optimized, position-independent, no fused multiply-add (results equal plain torch
    ops); AVX2 where torch's CPU capability has it."""
    flags = ["-O3", "-shared", "-fPIC", "-pthread", "-std=c99", "-ffp-contract=off"]
    if platform.machine().lower() in ("x86_64", "amd64") and \
            torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        flags.append("-mavx2")
    return flags


def aten_uses_openmp() -> bool:
    """Whether torch's intra-op threads are OpenMP threads (its parallel backend)."""
    return "ATen parallel backend: OpenMP" in torch.__config__.parallel_info()


def library_loaded(soname: str) -> bool:
    """Whether a shared library of this name is loaded in this process: the dynamic
    loader's own answer (``dlopen`` with ``RTLD_NOLOAD`` loads nothing); False where that
    flag does not exist."""
    flag = getattr(os, "RTLD_NOLOAD", None)
    if flag is None:
        return False
    try:
        ctypes.CDLL(soname, mode=flag | getattr(os, "RTLD_LAZY", 1))
    except OSError:
        return False
    return True


def openmp_decision() -> tuple[bool, str]:
    """(whether to build with -fopenmp, why): yes only where torch's intra-op threads run
    on the runtime a kernel built with -fopenmp binds to (module docstring)."""
    if not aten_uses_openmp():
        return False, "torch's intra-op threads are not OpenMP threads"
    if not library_loaded(GNU_OPENMP):
        return False, f"torch's OpenMP runtime is not {GNU_OPENMP}"
    return True, f"torch runs its intra-op threads on {GNU_OPENMP}"


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


def cache_key(source: str, compiler: str, flags: list[str]) -> str:
    """16 hex digits of a hash of the source, compiler (path and version), flags and
    machine."""
    parts = [source, compiler, compiler_version(compiler), *flags, platform.machine()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def compile_and_load(source: str, name: str, compiler: str, flags: list[str]) -> ctypes.CDLL:
    """The library built from ``source`` (C) with ``flags``, from the cache if built before.

    RuntimeError naming the compiler, with its messages, if the build fails."""
    target = build_dir() / f"{name}_{cache_key(source, compiler, flags)}.so"
    if not target.exists():
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            path = Path(tmp) / f"{name}.c"
            path.write_text(source)
            built = Path(tmp) / target.name
            try:
                proc = subprocess.run([compiler, *flags, str(path), "-o", str(built)],
                                      capture_output=True, text=True, timeout=300,
                                      check=False)
            except (OSError, subprocess.SubprocessError) as err:
                raise RuntimeError(f"{compiler} could not run: {err}") from err
            if proc.returncode != 0:
                raise RuntimeError(f"{compiler} could not build {name}.c (exit "
                                   f"{proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
            os.replace(built, target)               # atomic: same folder, same file system
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
