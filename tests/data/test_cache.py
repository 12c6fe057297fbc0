"""The token cache: a memory-mapped stream that is never tokenized twice, in
$POSENC_CACHE_DIR by default; the document starts kept next to it, checked, and completed for
a cache written without them."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.data import cache, corpora
from posenc.data.batches import prepare_data
from posenc.data.corpora import load_corpus
from posenc.data.tokenizer import ByteTokenizer, build_tokenizer
from tests.data.helpers import write_files, write_short_files
from tests.helpers import raises_one_line


def test_token_stream_is_cached_memmap_and_not_retokenized(tmp_path, monkeypatch):
    c = load_corpus(str(write_files(tmp_path / "docs", 40)))
    tok = ByteTokenizer()
    first = cache.token_stream(c, tok, "train", tmp_path / "cache")
    assert isinstance(first, np.memmap) and first.dtype == np.uint16 and first.ndim == 1
    expected = b"".join(t.encode() + b"\0" for t in c.texts("train"))
    np.testing.assert_array_equal(first, np.frombuffer(expected, dtype=np.uint8))
    files = sorted(p.name for p in (tmp_path / "cache" / "tokens").iterdir())
    name = f"{c.sha256[:16]}-byte-train.npy"
    starts = name.replace(".npy", "-starts.npy")
    assert files == sorted([name, name + ".sha256", starts, starts + ".sha256"])  # no temporary

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


def expected_starts(corpus, tokenizer, split):
    lengths = [len(tokenizer.encode(t)) + 1 for t in corpus.texts(split)]   # + separator
    return np.concatenate([[0], np.cumsum(lengths)[:-1]])


@pytest.mark.parametrize("spec", ["byte", "bpe:300"])
def test_document_starts_are_cached_with_the_stream(tmp_path, monkeypatch, spec):
    c = load_corpus(str(write_short_files(tmp_path / "docs", 60)))
    tok = build_tokenizer(spec, c, tmp_path / "cache")
    for split in ("train", "validation"):
        starts = cache.document_starts(c, tok, split, tmp_path / "cache")
        assert starts.dtype == np.int64 and len(starts) == len(c.texts(split))
        np.testing.assert_array_equal(starts, expected_starts(c, tok, split))
        stream = cache.token_stream(c, tok, split, tmp_path / "cache")
        np.testing.assert_array_equal(stream[starts[1:] - 1], tok.sep_id)   # docs end with it
    path = cache.starts_path(c, tok, "train", tmp_path / "cache")
    assert path.is_file() and path.with_name(path.name + ".sha256").is_file()
    monkeypatch.setattr(cache, "encode_documents", _boom)
    np.testing.assert_array_equal(cache.document_starts(c, tok, "train", tmp_path / "cache"),
                                  expected_starts(c, tok, "train"))      # reloaded


def _boom(*a, **k):
    raise AssertionError("re-tokenized")


def test_damaged_document_starts_are_reported(tmp_path):
    c = load_corpus(str(write_short_files(tmp_path / "docs", 60)))
    tok = ByteTokenizer()
    cache.token_stream(c, tok, "train", tmp_path)
    path = cache.starts_path(c, tok, "train", tmp_path)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x01
    path.write_bytes(bytes(raw))
    msg = raises_one_line("is corrupt", cache.document_starts, c, tok, "train", tmp_path)
    assert str(path) in msg and "delete it to rebuild it" in msg
    # a well-formed array with its checksum that cannot be this stream's starts
    cache._save_checked(path, np.array([0, 5], dtype=np.int64))
    msg = raises_one_line("does not fit its token stream", cache.document_starts, c, tok,
                          "train", tmp_path)
    assert f"2 document starts for {len(c.texts('train'))} documents" in msg


def remove_starts(c, tok, cache_dir):
    for split in ("train", "validation", "test"):
        path = cache.starts_path(c, tok, split, cache_dir)
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".sha256").unlink(missing_ok=True)


def test_a_cache_without_document_starts_serves_and_is_completed(tmp_path, monkeypatch):
    """A token cache written before document starts were kept: unpacked training reads it
    as it is; asking for the starts completes it from the separators, without tokenizing."""
    c = load_corpus(str(write_short_files(tmp_path / "docs", 60)))
    tok = ByteTokenizer()
    for split in ("train", "validation", "test"):
        cache.token_stream(c, tok, split, tmp_path)
    remove_starts(c, tok, tmp_path)
    monkeypatch.setattr(cache, "encode_documents", _boom)
    data = prepare_data(str(tmp_path / "docs"), tok, None, 16, tmp_path)
    assert not data.packed and data.batch(2, 16, 0, 0).inputs.shape == (2, 16)
    assert not cache.starts_path(c, tok, "train", tmp_path).exists()    # left as it was
    starts = cache.document_starts(c, tok, "train", tmp_path)
    np.testing.assert_array_equal(starts, expected_starts(c, tok, "train"))
    assert cache.starts_path(c, tok, "train", tmp_path).is_file()
    assert prepare_data(str(tmp_path / "docs"), tok, None, 16, tmp_path, pack=True).packed


def test_completing_starts_tokenizes_again_when_separators_are_ambiguous(tmp_path):
    """A NUL byte inside a document is the byte tokenizer's separator too: the starts then
    come from tokenizing the split again, which must give the cached stream back."""
    docs = {"train": ("one\0two\n", "three\n", "four\0\0\n"), "validation": ("v\n",),
            "test": ("t\n",)}
    c = corpora._make("nul", docs, "test-rule", 0)
    tok = ByteTokenizer()
    stream = cache.token_stream(c, tok, "train", tmp_path)
    for split in ("validation", "test"):
        cache.token_stream(c, tok, split, tmp_path)
    remove_starts(c, tok, tmp_path)
    np.testing.assert_array_equal(cache.document_starts(c, tok, "train", tmp_path),
                                  [0, 9, 16])
    remove_starts(c, tok, tmp_path)
    path = cache.stream_path(c, tok, "train", tmp_path)
    cache._save_checked(path, np.asarray(stream)[::-1].copy())     # consistent, but not this
    msg = raises_one_line("differs from a fresh tokenization", cache.document_starts, c, tok,
                          "train", tmp_path)
    assert str(path) in msg
