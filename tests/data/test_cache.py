"""The token cache: a memory-mapped stream that is never tokenized twice, in
$POSENC_CACHE_DIR by default."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.data import cache
from posenc.data.corpora import load_corpus
from posenc.data.tokenizer import ByteTokenizer

from tests.data.helpers import write_files


def test_token_stream_is_cached_memmap_and_not_retokenized(tmp_path, monkeypatch):
    c = load_corpus(str(write_files(tmp_path / "docs", 40)))
    tok = ByteTokenizer()
    first = cache.token_stream(c, tok, "train", tmp_path / "cache")
    assert isinstance(first, np.memmap) and first.dtype == np.uint16 and first.ndim == 1
    expected = b"".join(t.encode() + b"\0" for t in c.texts("train"))
    np.testing.assert_array_equal(first, np.frombuffer(expected, dtype=np.uint8))
    files = sorted(p.name for p in (tmp_path / "cache" / "tokens").iterdir())
    name = f"{c.sha256[:16]}-byte-train.npy"
    assert files == [name, name + ".sha256"]                       # no temporary file left

    def boom(*a, **k):
        raise AssertionError("re-tokenized")

    monkeypatch.setattr(cache, "encode_documents", boom)
    again = cache.token_stream(c, tok, "train", tmp_path / "cache")
    np.testing.assert_array_equal(again, first)
    with pytest.raises(AssertionError, match="re-tokenized"):      # another split is new
        cache.token_stream(c, tok, "test", tmp_path / "cache")


def test_token_cache_default_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "pc"))
    assert cache.default_cache_dir() == tmp_path / "pc"
    c = load_corpus(str(write_files(tmp_path / "docs", 40)))
    cache.token_stream(c, ByteTokenizer(), "validation")
    assert (tmp_path / "pc" / "tokens" / f"{c.sha256[:16]}-byte-validation.npy").is_file()
