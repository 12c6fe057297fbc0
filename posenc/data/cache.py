"""On-disk cache of tokenized corpora as memory-mapped numpy arrays.

A split of a corpus, tokenized, is one 1-D ``.npy`` array of ids (``uint16`` when the
vocabulary fits, else ``uint32``) with the tokenizer's separator after every document, and
next to it the start offset of every document (``<name>-starts.npy``, int64; see
:mod:`posenc.data.documents`), which training on packed documents needs. File names hold the
corpus hash, the tokenizer's fingerprint and the split, so a second run maps the files
instead of tokenizing again. Files are written to a temporary name and renamed, so an
interrupted run never leaves a half-written array under the final name; each array's sha256
is kept next to it (``<name>.npy.sha256``) and checked on every load, so a file damaged in
place is reported (UserError naming it), never used.

A cache written before document starts were kept serves unpacked training as it is;
:func:`document_starts` completes it (from the separators when that is exact, else by
tokenizing the split again and checking that the stream is the same).

The files live under ``tokens/`` in posenc's cache folder (:func:`posenc.paths.cache_dir`:
``$POSENC_CACHE_DIR``, else ``$XDG_CACHE_HOME/posenc``, else ``~/.cache/posenc``) unless a
``cache_dir`` is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import paths
from ..errors import UserError
from ..runio import atomic_write, atomic_write_with, sha256_file
from .documents import check_starts, starts_from_lengths, starts_from_separators

if TYPE_CHECKING:
    from .corpora import Corpus
    from .tokenizer import Tokenizer


__all__ = ["default_cache_dir", "document_starts", "encode_documents", "starts_path",
           "stream_path", "token_stream"]


def default_cache_dir() -> Path:
    """posenc's cache folder (:func:`posenc.paths.cache_dir`), which holds the token cache's
    ``tokens/`` and the trained tokenizers' ``tokenizers/``; created if missing."""
    return paths.cache_dir()


def token_stream(corpus: Corpus, tokenizer: Tokenizer, split: str,
                 cache_dir: str | Path | None = None) -> np.ndarray:
    """The token ids of ``split`` as a read-only 1-D memory-mapped array (cached on disk,
    with the split's document starts when it is tokenized)."""
    cache_dir = _cache_folder(cache_dir)
    path = stream_path(corpus, tokenizer, split, cache_dir)
    stream = _load_checked(path)
    if stream is not None:
        return stream
    ids, starts = encode_documents(tokenizer, corpus.texts(split))   # absent, or written by
    path.parent.mkdir(parents=True, exist_ok=True)                   # a crash before its
    _save_checked(path, ids)                                         # checksum: rebuild
    _save_checked(starts_path(corpus, tokenizer, split, cache_dir), starts)
    return _load_checked(path)


def document_starts(corpus: Corpus, tokenizer: Tokenizer, split: str,
                    cache_dir: str | Path | None = None) -> np.ndarray:
    """The start offset of every document of ``split`` in its token stream: (N,) int64,
    cached next to the stream (an older cache without them is completed)."""
    cache_dir = _cache_folder(cache_dir)
    stream = token_stream(corpus, tokenizer, split, cache_dir)
    path = starts_path(corpus, tokenizer, split, cache_dir)
    texts = corpus.texts(split)
    starts = _load_checked(path)
    if starts is None:                      # a cache written before starts were kept
        starts = starts_from_separators(stream, tokenizer.sep_id, len(texts))
        if starts is None:
            ids, starts = encode_documents(tokenizer, texts)
            if not np.array_equal(ids, stream):
                raise UserError(f"token cache {stream_path(corpus, tokenizer, split, cache_dir)}"
                                 f" differs from a fresh tokenization of its split; delete it "
                                 f"to rebuild it")
        _save_checked(path, starts)
        starts = _load_checked(path)
    problem = check_starts(starts, len(stream), len(texts))
    if problem is not None:
        raise UserError(f"token cache {path} does not fit its token stream ({problem}); "
                         f"delete it to rebuild it")
    return starts


def _cache_folder(cache_dir: str | Path | None) -> Path:
    """``cache_dir`` as a Path (None: the default); an empty string is refused, it would be
    the working directory."""
    if cache_dir is None:
        return default_cache_dir()
    if cache_dir == "":
        raise UserError("cache_dir is an empty path; name a folder (or None for posenc's "
                        "cache folder)")
    return Path(cache_dir)


def stream_path(corpus: Corpus, tokenizer: Tokenizer, split: str, cache_dir: Path) -> Path:
    return Path(cache_dir) / "tokens" / f"{corpus.sha256[:16]}-{tokenizer.fingerprint}-{split}.npy"


def starts_path(corpus: Corpus, tokenizer: Tokenizer, split: str, cache_dir: Path) -> Path:
    """Where the document starts of ``split`` are cached (next to its stream)."""
    stream = stream_path(corpus, tokenizer, split, cache_dir)
    return stream.with_name(f"{stream.stem}-starts.npy")


def encode_documents(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The ids of ``texts`` concatenated, each followed by ``tokenizer.sep_id`` (N,), and the
    start offset of each text in them (len(texts),) int64."""
    dtype = np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.uint32
    if tokenizer.spec == "byte":                        # fast path: bytes are the ids
        raw = [t.encode("utf-8") + bytes([tokenizer.sep_id]) for t in texts]
        lengths = np.fromiter((len(r) for r in raw), dtype=np.int64, count=len(raw))
        return np.frombuffer(b"".join(raw), dtype=np.uint8).astype(dtype), \
            starts_from_lengths(lengths)
    parts = []
    for start in range(0, len(texts), 256):
        for ids in tokenizer.encode_batch(texts[start:start + 256]):
            parts.append(np.asarray(ids + [tokenizer.sep_id], dtype=dtype))
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    return ids, starts_from_lengths(lengths)


# ------------------------------------------------------------ checked files
def _load_checked(path: Path) -> np.ndarray | None:
    """The array at ``path`` memory-mapped, or None when it or its checksum is missing (never
    written, or a crash came between the two); UserError naming it when it is damaged."""
    digest = path.with_name(path.name + ".sha256")
    if not (path.is_file() and digest.is_file()):
        return None
    if sha256_file(path) != digest.read_text().strip():
        raise UserError(f"token cache {path} is corrupt (its sha256 differs from the one "
                         f"recorded when it was written); delete it to rebuild it")
    try:
        return np.load(path, mmap_mode="r")
    except (OSError, ValueError) as err:
        raise UserError(f"token cache {path} is unreadable ({err}); delete it to rebuild "
                         f"it") from None


def _save_checked(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path``, then its sha256 (both atomically)."""
    atomic_write_with(path, lambda f: np.save(f, array))
    digest = path.with_name(path.name + ".sha256")
    atomic_write(digest, (sha256_file(path) + "\n").encode())
