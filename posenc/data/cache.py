"""On-disk cache of tokenized corpora as memory-mapped numpy arrays.

A split of a corpus, tokenized, is one 1-D ``.npy`` array of ids (``uint16`` when the
vocabulary fits, else ``uint32``) with the tokenizer's separator after every document. Its
file name holds the corpus hash, the tokenizer's fingerprint and the split, so a second run
maps the file instead of tokenizing again. Files are written to a temporary name and renamed,
so an interrupted run never leaves a half-written array under the final name; the array's
sha256 is kept next to it (``<name>.npy.sha256``) and checked on every load, so a file damaged
in place is reported (ValueError naming it), never used.

The files live under ``tokens/`` in posenc's cache folder (:func:`posenc.paths.cache_dir`:
``$POSENC_CACHE_DIR``, else ``$XDG_CACHE_HOME/posenc``, else ``~/.cache/posenc``) unless a
``cache_dir`` is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import paths
from ..runio import atomic_write, atomic_write_with, sha256_file

if TYPE_CHECKING:
    from .corpora import Corpus
    from .tokenizer import Tokenizer


__all__ = ["default_cache_dir", "encode_documents", "stream_path", "token_stream"]


def default_cache_dir() -> Path:
    """posenc's cache folder (:func:`posenc.paths.cache_dir`), which holds the token cache's
    ``tokens/`` and the trained tokenizers' ``tokenizers/``; created if missing."""
    return paths.cache_dir()


def token_stream(corpus: Corpus, tokenizer: Tokenizer, split: str,
                 cache_dir: str | Path | None = None) -> np.ndarray:
    """The token ids of ``split`` as a read-only 1-D memory-mapped array (cached on disk)."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = stream_path(corpus, tokenizer, split, cache_dir)
    digest = path.with_name(path.name + ".sha256")
    if path.is_file() and digest.is_file():
        expected = digest.read_text().strip()
        if sha256_file(path) != expected:
            raise ValueError(f"token cache {path} is corrupt (its sha256 differs from the one "
                             f"recorded when it was written); delete it to rebuild it")
        try:
            return np.load(path, mmap_mode="r")
        except (OSError, ValueError) as err:
            raise ValueError(f"token cache {path} is unreadable ({err}); delete it to rebuild "
                             f"it") from None
    ids = encode_documents(tokenizer, corpus.texts(split))   # absent, or written by a crash
    path.parent.mkdir(parents=True, exist_ok=True)           # before its checksum: rebuild
    atomic_write_with(path, lambda f: np.save(f, ids))
    atomic_write(digest, (sha256_file(path) + "\n").encode())
    return np.load(path, mmap_mode="r")


def stream_path(corpus: Corpus, tokenizer: Tokenizer, split: str, cache_dir: Path) -> Path:
    return Path(cache_dir) / "tokens" / f"{corpus.sha256[:16]}-{tokenizer.fingerprint}-{split}.npy"


def encode_documents(tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    """Concatenate the ids of ``texts``, each followed by ``tokenizer.sep_id``: (N,)."""
    dtype = np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.uint32
    if tokenizer.spec == "byte":                        # fast path: bytes are the ids
        raw = b"".join(t.encode("utf-8") + bytes([tokenizer.sep_id]) for t in texts)
        return np.frombuffer(raw, dtype=np.uint8).astype(dtype)
    parts = []
    for start in range(0, len(texts), 256):
        for ids in tokenizer.encode_batch(texts[start:start + 256]):
            parts.append(np.asarray(ids + [tokenizer.sep_id], dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
