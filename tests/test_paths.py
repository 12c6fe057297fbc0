"""One cache folder for every cache: chosen by POSENC_CACHE_DIR, else XDG_CACHE_HOME, else ~."""

from __future__ import annotations

import ast
import shutil
import stat
from pathlib import Path

import pytest

import posenc.paths as paths
from posenc.data import cache as token_cache
from posenc.data.corpora import load_corpus
from posenc.data.tokenizer import ByteTokenizer
from posenc.hf.load import default_gguf_cache
from posenc.kernels import build as native_build

ENV = ("POSENC_CACHE_DIR", "POSENC_CACHE", "POSENC_GGUF_CACHE", "XDG_CACHE_HOME")


@pytest.fixture
def env(monkeypatch, tmp_path):
    """No cache variable set, and a home folder of our own."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_the_variable_wins_then_xdg_then_home(env, tmp_path):
    assert paths.cache_root() == tmp_path / "home" / ".cache" / "posenc"
    env.setenv("XDG_CACHE_HOME", "relative/xdg")          # the XDG spec ignores it
    assert paths.cache_root() == tmp_path / "home" / ".cache" / "posenc"
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_root() == tmp_path / "xdg" / "posenc"
    env.setenv("POSENC_CACHE", str(tmp_path / "old"))      # an old name: not read any more
    assert paths.cache_root() == tmp_path / "xdg" / "posenc"
    env.setenv("POSENC_CACHE_DIR", str(tmp_path / "new"))
    assert paths.cache_root() == tmp_path / "new"


def test_cache_dir_is_created_private_on_demand(env, tmp_path):
    env.setenv("POSENC_CACHE_DIR", str(tmp_path / "c"))
    assert not (tmp_path / "c").exists()
    assert paths.cache_root() == tmp_path / "c"               # naming it creates nothing
    assert not (tmp_path / "c").exists()
    sub = paths.cache_dir("tokens")
    assert sub == tmp_path / "c" / "tokens" and sub.is_dir()
    for folder in (tmp_path / "c", sub):
        assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0
    assert paths.cache_dir() == tmp_path / "c"
    (tmp_path / "f").write_text("not a folder")
    env.setenv("POSENC_CACHE_DIR", str(tmp_path / "f"))
    with pytest.raises(OSError):
        paths.cache_dir()


def test_paths_imports_nothing_from_posenc():
    tree = ast.parse(Path(paths.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("posenc")
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("posenc") for a in node.names)


def test_every_cache_lives_in_the_one_folder(env, tmp_path):
    root = tmp_path / "c"
    env.setenv("POSENC_CACHE_DIR", str(root))
    assert token_cache.default_cache_dir() == root
    assert default_gguf_cache() == root / "gguf" and (root / "gguf").is_dir()
    assert native_build.build_dir() == root
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(12):
        (docs / f"{i}.txt").write_text(f"document {i}\n" * 5)
    corpus, tokenizer = load_corpus(str(docs)), ByteTokenizer()
    token_cache.token_stream(corpus, tokenizer, "train")
    written = token_cache.stream_path(corpus, tokenizer, "train", root)
    assert written.parent == root / "tokens" and written.is_file()


def test_gguf_cache_is_a_folder_of_the_one_cache(env, tmp_path):
    env.setenv("POSENC_CACHE_DIR", str(tmp_path / "c"))
    env.setenv("POSENC_GGUF_CACHE", str(tmp_path / "g"))    # an old name: not read any more
    assert default_gguf_cache() == tmp_path / "c" / "gguf"


def test_native_build_falls_back_to_a_private_temporary_folder(env, tmp_path):
    (tmp_path / "f").write_text("not a folder")
    env.setenv("POSENC_CACHE_DIR", str(tmp_path / "f"))
    where = native_build.build_dir()
    try:
        assert where.is_dir() and where.name.startswith("posenc-")
        assert stat.S_IMODE(where.stat().st_mode) & 0o077 == 0
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_native_kernels_are_built_into_the_cache_folder(env, tmp_path):
    try:
        compiler = native_build.find_compiler()
    except RuntimeError:
        pytest.skip("no C compiler")
    env.setenv("POSENC_CACHE_DIR", str(tmp_path / "c"))
    lib = native_build.compile_and_load("int probe(void) { return 7; }", "probe", compiler,
                                        ["-O0", "-shared", "-fPIC"])
    assert lib.probe() == 7
    assert [p.suffix for p in (tmp_path / "c").glob("probe_*")] == [".so"]
