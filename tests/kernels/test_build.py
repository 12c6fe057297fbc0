"""Building the native kernels: the sources ship with the package, the cache key and its
atomic install, the compiler's messages on a failed build, the OpenMP decision, and when a
kernel test may skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import posenc
from posenc.kernels import build as native_build
from posenc.kernels import pairs, rotary_native
from tests.kernels.native import require_native

ROOT = Path(posenc.__file__).resolve().parent.parent
needs_compiler = pytest.mark.skipif(not native_build.have_compiler(),
                                    reason="no C compiler (set CC)")
PROBE = "int probe(void) { return 7; }\n"
FLAGS = ["-O0", "-shared", "-fPIC"]
OPENMP_PROBE = ("int omp_get_max_threads(void);\n"
                "int probe(void) { return omp_get_max_threads(); }\n")


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_no_python_file_holds_c_source():
    sources = Path(posenc.__file__).parent
    include = "#include" + " <"                     # spelled apart: this file holds no C
    assert not [p for p in sources.rglob("*.py") if include in p.read_text()]
    for name in ("rotary", "pairs"):
        assert native_build.kernel_source(name).startswith("/* posenc ")


@needs_compiler
def test_installed_package_finds_its_sources(tmp_path):
    """A non-editable install (the wheel pip builds) carries csrc/*.c and reads them there."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "posenc", tree / "posenc",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(target), str(tree)],
                   check=True, capture_output=True, timeout=600)
    assert sorted(p.name for p in (target / "posenc/kernels/csrc").iterdir()) == \
        ["pairs.c", "rotary.c"]
    script = ("import posenc.kernels.build as b, posenc.kernels.rotary as r; "
              "print(b.__file__); print(r.native_rotary_status())")
    env = {**os.environ, "PYTHONPATH": str(target),
           "POSENC_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("POSENC_NATIVE_KERNELS", None)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True, timeout=300).stdout.split("\n")
    assert out[0].startswith(str(target)) and out[1] == "ready"


@needs_compiler
def test_cache_key_follows_source_flags_and_compiler(monkeypatch):
    compiler = native_build.find_compiler()
    key = native_build.cache_key(PROBE, compiler, FLAGS)
    assert key == native_build.cache_key(PROBE, compiler, list(FLAGS))
    assert key != native_build.cache_key(PROBE + "\n", compiler, FLAGS)
    assert key != native_build.cache_key(PROBE, compiler, [*FLAGS, "-fopenmp"])
    monkeypatch.setattr(native_build, "compiler_version", lambda c: "cc 99.0")
    assert key != native_build.cache_key(PROBE, compiler, FLAGS)


@needs_compiler
def test_build_is_installed_atomically_and_reused(cache, monkeypatch):
    """Built in a temporary folder inside the cache folder, renamed into place; nothing
    else is left there, and a second build reuses the file without the compiler."""
    moves = []
    real_replace = os.replace
    monkeypatch.setattr(native_build.os, "replace",
                        lambda a, b: moves.append((Path(a), Path(b))) or real_replace(a, b))
    compiler = native_build.find_compiler()
    assert native_build.compile_and_load(PROBE, "probe", compiler, FLAGS).probe() == 7
    [(built, target)] = moves
    assert target.parent == cache and built.parent.parent == cache and target.exists()
    assert [p.name for p in cache.iterdir()] == [target.name]

    def no_compiler(*args, **kwargs):
        raise AssertionError("the cached build should be reused")
    monkeypatch.setattr(native_build.subprocess, "run", no_compiler)   # version: cached too
    assert native_build.compile_and_load(PROBE, "probe", compiler, FLAGS).probe() == 7


@needs_compiler
def test_a_broken_source_names_the_compiler(cache):
    compiler = native_build.find_compiler()
    with pytest.raises(RuntimeError) as err:
        native_build.compile_and_load("int broken(void) { return }\n", "broken", compiler,
                                      FLAGS)
    message = str(err.value)
    assert message.startswith(f"{compiler} could not build broken.c")
    assert "broken.c" in message.split("\n", 1)[1] and "error" in message
    assert list(cache.iterdir()) == []                       # nothing half-written is left


def test_missing_compiler_is_reported(monkeypatch):
    monkeypatch.setenv("CC", "posenc-no-such-compiler")
    with pytest.raises(RuntimeError, match="no C compiler: CC='posenc-no-such-compiler'"):
        native_build.find_compiler()
    assert not native_build.have_compiler()
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="no C compiler found"):
        native_build.find_compiler()


@needs_compiler
@pytest.mark.parametrize("name", ["rotary", "pairs"])
@pytest.mark.parametrize("openmp", [False, True], ids=["pthreads", "openmp"])
def test_every_source_builds_both_ways(cache, name, openmp):
    """Both sources build with and without OpenMP wherever there is a compiler (with it,
    where the compiler takes -fopenmp at all)."""
    compiler = native_build.find_compiler()
    if openmp:
        try:
            native_build.compile_and_load(OPENMP_PROBE, "omp_probe", compiler,
                                          [*FLAGS, "-fopenmp"])
        except RuntimeError as err:
            pytest.skip(f"this compiler has no OpenMP: {err}")
    flags = native_build.compiler_flags() + (["-fopenmp"] if openmp else [])
    lib = native_build.compile_and_load(native_build.kernel_source(name), name, compiler,
                                        flags)
    assert hasattr(lib, "posenc_rotary" if name == "rotary" else "posenc_pair_write")


# ------------------------------------------------------------------------ OpenMP decision

GNU_INFO = "ATen/Parallel:\n\tat::get_num_threads() : 2\nATen parallel backend: OpenMP\n"
NATIVE_INFO = "ATen/Parallel:\n\tat::get_num_threads() : 2\nATen parallel backend: native " \
              "thread pool\n"


@pytest.mark.parametrize("info,loaded,expected", [
    (GNU_INFO, True, (True, "torch runs its intra-op threads on libgomp.so.1")),
    (GNU_INFO, False, (False, "torch's OpenMP runtime is not libgomp.so.1")),
    (NATIVE_INFO, True, (False, "torch's intra-op threads are not OpenMP threads")),
], ids=["libgomp", "other-openmp-runtime", "native-pool"])
def test_openmp_decision_branches(monkeypatch, info, loaded, expected):
    monkeypatch.setattr(torch.__config__, "parallel_info", lambda: info)
    monkeypatch.setattr(native_build, "library_loaded", lambda name: loaded)
    assert native_build.openmp_decision() == expected


@pytest.mark.parametrize("openmp", [True, False])
def test_kernels_build_with_openmp_only_when_decided(monkeypatch, openmp):
    """The rotary kernel: -fopenmp when decided, else the POSIX-threads build; the pair
    kernels: built only when decided (they run on torch's OpenMP workers)."""
    builds = []
    monkeypatch.setattr(native_build, "find_compiler", lambda: "cc")
    monkeypatch.setattr(native_build, "openmp_decision", lambda: (openmp, "because"))
    monkeypatch.setattr(native_build, "compile_and_load",
                        lambda source, name, compiler, flags: builds.append((name, flags)))
    monkeypatch.setattr(rotary_native, "_declare", lambda lib: lib)
    rotary_native._build_and_load()
    assert builds == [("rotary", native_build.compiler_flags() + ["-fopenmp"] * openmp)]
    builds.clear()
    if openmp:
        monkeypatch.setattr(pairs, "_declare", lambda lib: lib)
        pairs._build()
        assert builds == [("pairs", native_build.compiler_flags() + ["-fopenmp"])]
    else:
        with pytest.raises(RuntimeError, match="not built: because"):
            pairs._build()
        assert builds == []


def test_openmp_build_falls_back_to_pthreads_without_compiler_support(monkeypatch):
    builds = []

    def build(source, name, compiler, flags):
        builds.append(flags)
        if "-fopenmp" in flags:
            raise RuntimeError("cc could not build rotary.c: unsupported option -fopenmp")
        return "lib"
    monkeypatch.setattr(native_build, "find_compiler", lambda: "cc")
    monkeypatch.setattr(native_build, "openmp_decision", lambda: (True, "libgomp"))
    monkeypatch.setattr(native_build, "compile_and_load", build)
    monkeypatch.setattr(rotary_native, "_declare", lambda lib: lib)
    assert rotary_native._build_and_load() == "lib"
    assert [("-fopenmp" in f) for f in builds] == [True, False]


def test_loader_probe_agrees_with_the_process_map():
    """Linux: the loader's answer equals what /proc/self/maps shows; a library that is not
    loaded is never loaded by asking."""
    assert not native_build.library_loaded("libposenc-not-a-library.so.1")
    if not Path("/proc/self/maps").exists():
        pytest.skip("no /proc/self/maps to compare with")
    with open("/proc/self/maps") as maps:
        mapped = any(line.rstrip().endswith("/libgomp.so.1") for line in maps)
    assert native_build.library_loaded("libgomp.so.1") == mapped


def test_without_rtld_noload_the_runtime_is_unknown(monkeypatch):
    monkeypatch.delattr(os, "RTLD_NOLOAD", raising=False)
    assert not native_build.library_loaded("libgomp.so.1")


# ------------------------------------------------------------------- when kernel tests skip

def test_kernel_tests_fail_when_a_compiler_exists_but_the_build_fails(monkeypatch):
    broken = "native rotary kernel unavailable: cc could not build rotary.c (exit 1):\nerror"
    monkeypatch.setattr(native_build, "have_compiler", lambda: True)
    with pytest.raises(pytest.fail.Exception, match="could not build rotary.c"):
        require_native(broken)
    monkeypatch.setattr(native_build, "have_compiler", lambda: False)
    with pytest.raises(pytest.skip.Exception, match="no C compiler"):
        require_native(broken)
    require_native("ready")


def test_a_failed_build_is_reported_by_the_status(monkeypatch):
    def build():
        raise RuntimeError("cc could not build rotary.c (exit 1):\nrotary.c:1: error")
    monkeypatch.delenv("POSENC_NATIVE_KERNELS", raising=False)
    kernel = native_build.LazyKernel("rotary", build)
    assert kernel.load() is None
    assert kernel.status() == ("native rotary kernel unavailable: cc could not build "
                               "rotary.c (exit 1):\nrotary.c:1: error")
