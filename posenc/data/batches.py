"""Training batches that depend only on (seed, step): resuming or changing the number of
processes never changes which data a step sees.

A step draws a *global* batch of ``batch_size * world_size`` examples from a generator seeded
by ``(seed, step)``; rank ``r`` takes rows ``r * batch_size`` to ``(r + 1) * batch_size``. So
one process with batch 2B sees exactly the windows two DDP processes with batch B see
together.

A window is a slice of a split's token stream, the documents concatenated. Unpacked, the
model reads it as one text across document boundaries. Packed (``pack=True``), the same
window comes with ``document_ids``: each document restarts at position 0 and attends only to
itself, and the target of a document's last token (the next document's first token, which it
cannot see coming) is not scored.
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..errors import UserError
from .cache import default_cache_dir, document_starts, token_stream
from .corpora import load_corpus
from .documents import window_documents
from .synthetic import IGNORE, make_task
from .tokenizer import Tokenizer, build_tokenizer

_WINDOW_STREAM = 0x57494E44          # separates window draws from other uses of the seed


@dataclass(frozen=True)
class Batch:
    """Examples for the model: ``inputs`` and next-token ``targets`` (B, T) long (``IGNORE``
    where not scored), and for packed documents their ``document_ids`` (B, T) (else None)."""

    inputs: Tensor
    targets: Tensor
    document_ids: Tensor | None = None

    def to(self, device: torch.device | str) -> Batch:
        """The batch on ``device`` (copies start without blocking)."""
        docs = self.document_ids
        return Batch(self.inputs.to(device, non_blocking=True),
                     self.targets.to(device, non_blocking=True),
                     None if docs is None else docs.to(device, non_blocking=True))

    def rows(self, start: int, stop: int) -> Batch:
        """Examples ``start`` to ``stop`` (views)."""
        docs = self.document_ids
        return Batch(self.inputs[start:stop], self.targets[start:stop],
                     None if docs is None else docs[start:stop])


def check_stream_length(stream: np.ndarray, length: int, split: str = "train") -> None:
    """UserError unless ``stream`` holds at least one window of ``length + 1`` tokens."""
    if len(stream) < length + 1:
        raise UserError(f"training length {length} is larger than the data: the {split} "
                         f"split has {len(stream)} tokens, need at least {length + 1}")


def sample_starts(n_tokens: int, batch_size: int, length: int, seed: int, step: int,
                  rank: int = 0, world_size: int = 1) -> np.ndarray:
    """Where the windows of ``step`` start in a stream of ``n_tokens`` tokens: (B,) int64,
    this rank's share of the global batch."""
    rng = np.random.default_rng([_WINDOW_STREAM, seed, step])
    starts = rng.integers(0, n_tokens - length, size=batch_size * world_size)
    return starts[rank * batch_size:(rank + 1) * batch_size]


def fixed_starts(n_tokens: int, eval_windows: int, length: int) -> np.ndarray:
    """Up to ``eval_windows`` evenly spaced window starts (n,) int64 in ``n_tokens`` tokens."""
    last = n_tokens - length - 1
    return np.unique(np.linspace(0, last, num=eval_windows).astype(np.int64))


def read_windows(stream: np.ndarray, starts: np.ndarray, length: int) -> tuple[Tensor, Tensor]:
    """Inputs ``stream[s:s + T]`` and next-token targets of each start: (B, T) long each."""
    rows = np.stack([np.asarray(stream[s:s + length + 1], dtype=np.int64) for s in starts])
    w = torch.from_numpy(rows)                                      # (B, T + 1)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def sample_windows(stream: np.ndarray, batch_size: int, length: int, seed: int, step: int,
                   rank: int = 0, world_size: int = 1) -> tuple[Tensor, Tensor]:
    """Random windows of ``stream`` for ``step``: inputs and next-token targets (B, T) long."""
    check_stream_length(stream, length)
    starts = sample_starts(len(stream), batch_size, length, seed, step, rank, world_size)
    return read_windows(stream, starts, length)


def packed_windows(stream: np.ndarray, documents: np.ndarray, starts: np.ndarray,
                   length: int) -> Batch:
    """The windows at ``starts`` as packed documents: ``document_ids`` say which document
    each token is in (:func:`~posenc.data.documents.window_documents`; ``documents`` are the
    stream's document starts), and the target of a document's last token, the first token of
    the next document, is ``IGNORE``. Inputs and the other targets are
    :func:`read_windows`'."""
    inputs, targets = read_windows(stream, starts, length)
    ids, last = window_documents(documents, starts, length)
    targets = targets.masked_fill(torch.from_numpy(last), IGNORE)
    return Batch(inputs, targets, torch.from_numpy(ids))


def task_batch(task: str, batch_size: int, length: int, seed: int, step: int,
               rank: int = 0, world_size: int = 1) -> tuple[Tensor, Tensor]:
    """Synthetic-task examples for ``step`` with the same sharding as :func:`sample_windows`."""
    batch = make_task(task, batch_size * world_size, length, seed=(seed, step))
    rows = slice(rank * batch_size, (rank + 1) * batch_size)
    return batch.inputs[rows].contiguous(), batch.targets[rows].contiguous()


# ------------------------------------------------------------ a run's data
_VALIDATION_STEP = 1 << 40          # task seed for validation examples (never a train step)


@dataclass(frozen=True)
class TrainData:
    """What a training run reads: token streams of a corpus, or a synthetic task.

    ``corpus_info`` is ``Corpus.info()`` (for a task: its name and a fixed hash, since tasks
    are generated from the seed). ``train_documents`` / ``validation_documents``: the
    streams' document starts when training on packed documents (else None).
    """

    tokenizer: Tokenizer
    corpus_info: dict[str, str]
    train: np.ndarray | None = None
    validation: np.ndarray | None = None
    task: str | None = None
    train_documents: np.ndarray | None = None
    validation_documents: np.ndarray | None = None

    @property
    def packed(self) -> bool:
        """Whether batches come as packed documents (with ``document_ids``)."""
        return self.train_documents is not None

    def batch(self, batch_size: int, length: int, seed: int, step: int, rank: int = 0,
              world_size: int = 1) -> Batch:
        """The examples (B, T) of training step ``step`` on process ``rank``."""
        if self.task is not None:
            return Batch(*task_batch(self.task, batch_size, length, seed, step, rank,
                                     world_size))
        check_stream_length(self.train, length)
        starts = sample_starts(len(self.train), batch_size, length, seed, step, rank,
                               world_size)
        if self.packed:
            return packed_windows(self.train, self.train_documents, starts, length)
        return Batch(*read_windows(self.train, starts, length))

    def validation_set(self, eval_windows: int, length: int, seed: int) -> Batch:
        """A fixed set of ``eval_windows`` validation examples (N, T) for a comparable
        loss."""
        if self.task is not None:
            b = make_task(self.task, eval_windows, length, seed=(seed, _VALIDATION_STEP))
            return Batch(b.inputs, b.targets)
        check_stream_length(self.validation, length, "validation")
        starts = fixed_starts(len(self.validation), eval_windows, length)
        if self.packed:
            return packed_windows(self.validation, self.validation_documents, starts, length)
        return Batch(*read_windows(self.validation, starts, length))


def prepare_data(data: str | None, tokenizer: str | Tokenizer, task: str | None,
                 train_len: int, cache_dir: str | Path | None = None, *,
                 pack: bool = False) -> TrainData:
    """Load the corpus (or task), build or take the tokenizer and map the cached streams
    (and, with ``pack``, their document starts).

    Raises UserError when a split is shorter than one window of ``train_len + 1`` tokens, or
    when ``pack`` is asked for a synthetic task (its examples are single documents already).
    """
    if task is not None:
        if pack:
            raise UserError(f"packing is for text data: the examples of task {task!r} are "
                             f"single documents already")
        tok = tokenizer if isinstance(tokenizer, Tokenizer) else build_tokenizer(
            tokenizer, None, cache_dir or default_cache_dir())
        digest = hashlib.sha256(f"posenc-synthetic-v1:{task}".encode()).hexdigest()
        info = {"name": f"task:{task}", "python_version": platform.python_version(),
                "sha256": digest}
        make_task(task, 1, train_len, seed=0)               # validates the length
        return TrainData(tokenizer=tok, corpus_info=info, task=task)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    corpus = load_corpus(data)
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else build_tokenizer(
        tokenizer, corpus, cache_dir)
    train = token_stream(corpus, tok, "train", cache_dir)
    validation = token_stream(corpus, tok, "validation", cache_dir)
    check_stream_length(train, train_len, "train")
    check_stream_length(validation, train_len, "validation")
    documents = {}
    if pack:
        documents = {f"{split}_documents": document_starts(corpus, tok, split, cache_dir)
                     for split in ("train", "validation")}
    return TrainData(tokenizer=tok, corpus_info=corpus.info(), train=train,
                     validation=validation, **documents)
