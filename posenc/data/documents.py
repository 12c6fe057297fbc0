"""Document boundaries in a token stream, and which document each token of a window is in.

A split's token stream is its documents concatenated, each followed by the tokenizer's
separator (:func:`posenc.data.cache.encode_documents`). Its *document starts* are the
offsets of each document's first token: an increasing int64 array (N,) beginning with 0, one
entry per document. A document's last token is its separator, so a model trained on packed
documents learns to predict where a document ends, but never the first token of the next one.

Shape key: B windows, T tokens per window, N documents.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_starts", "starts_from_lengths", "starts_from_separators", "window_documents"]


def starts_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """Document lengths (N,) in tokens -> their start offsets (N,) int64 in the stream."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def starts_from_separators(stream: np.ndarray, sep_id: int,
                           n_documents: int) -> np.ndarray | None:
    """The document starts of ``stream``, read from its separators, or None when that is not
    exact.

    Every document ends with a separator; when the stream holds exactly ``n_documents`` of
    them (and ends with one), each is the end of one document, so the starts follow. A document
    whose text encodes to the separator as well (a NUL byte, a literal ``<|endoftext|>``) makes
    more separators than documents: then None, and the caller tokenizes again.
    """
    ends = np.flatnonzero(np.asarray(stream) == sep_id)                    # (n_sep,)
    if len(ends) != n_documents or n_documents == 0 or ends[-1] != len(stream) - 1:
        return None
    return np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)


def check_starts(starts: np.ndarray, n_tokens: int, n_documents: int) -> str | None:
    """Why ``starts`` cannot be the document starts of a stream of ``n_tokens`` tokens holding
    ``n_documents`` documents, or None when they can."""
    if starts.ndim != 1 or starts.dtype != np.int64:
        return f"expected a 1-D int64 array, got {starts.ndim}-D {starts.dtype}"
    if len(starts) != n_documents:
        return f"{len(starts)} document starts for {n_documents} documents"
    if n_documents and (starts[0] != 0 or starts[-1] >= n_tokens
                        or not np.all(starts[1:] > starts[:-1])):
        return f"the starts are not increasing offsets from 0 into its {n_tokens} tokens"
    return None


def window_documents(starts: np.ndarray, window_starts: np.ndarray,
                     length: int) -> tuple[np.ndarray, np.ndarray]:
    """Which document each input token of the windows is in, and where a target crosses over.

    A window starting at offset ``s`` has inputs ``stream[s:s + T]`` and targets
    ``stream[s + 1:s + T + 1]``. Returns ``document_ids`` (B, T) int64, counting from 0 for the
    window's first (maybe partial) document and changing exactly where a document starts,
    and ``last`` (B, T) bool: True where an input is its document's last token, so that its
    target is the first token of the next document.
    """
    offsets = np.asarray(window_starts, dtype=np.int64)[:, None] + np.arange(length + 1)
    doc = np.searchsorted(starts, offsets, side="right") - 1                # (B, T + 1)
    return doc[:, :-1] - doc[:, :1], doc[:, 1:] != doc[:, :-1]
