"""Training batches that depend only on (seed, step): resuming or changing the number of
processes never changes which data a step sees.

A step draws a *global* batch of ``batch_size * world_size`` examples from a generator seeded
by ``(seed, step)``; rank ``r`` takes rows ``r * batch_size`` to ``(r + 1) * batch_size``. So
one process with batch 2B sees exactly the windows two DDP processes with batch B see
together.
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .cache import default_cache_dir, token_stream
from .corpora import load_corpus
from .synthetic import make_task
from .tokenizer import Tokenizer, build_tokenizer

_WINDOW_STREAM = 0x57494E44          # separates window draws from other uses of the seed


def check_stream_length(stream: np.ndarray, length: int, split: str = "train") -> None:
    """ValueError unless ``stream`` holds at least one window of ``length + 1`` tokens."""
    if len(stream) < length + 1:
        raise ValueError(f"training length {length} is larger than the data: the {split} "
                         f"split has {len(stream)} tokens, need at least {length + 1}")


def sample_windows(stream: np.ndarray, batch_size: int, length: int, seed: int, step: int,
                   rank: int = 0, world_size: int = 1) -> tuple[Tensor, Tensor]:
    """Random windows of ``stream`` for ``step``: inputs and next-token targets (B, T) long."""
    check_stream_length(stream, length)
    rng = np.random.default_rng([_WINDOW_STREAM, seed, step])
    starts = rng.integers(0, len(stream) - length, size=batch_size * world_size)
    starts = starts[rank * batch_size:(rank + 1) * batch_size]
    rows = np.stack([np.asarray(stream[s:s + length + 1], dtype=np.int64) for s in starts])
    w = torch.from_numpy(rows)                                      # (B, T + 1)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def fixed_windows(stream: np.ndarray, n_windows: int, length: int) -> tuple[Tensor, Tensor]:
    """Up to ``n_windows`` evenly spaced windows for a stable validation loss: (n, T) each."""
    check_stream_length(stream, length, "validation")
    last = len(stream) - length - 1
    starts = np.unique(np.linspace(0, last, num=n_windows).astype(np.int64))
    rows = np.stack([np.asarray(stream[s:s + length + 1], dtype=np.int64) for s in starts])
    w = torch.from_numpy(rows)                                      # (n, T + 1)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


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
    are generated from the seed).
    """

    tokenizer: Tokenizer
    corpus_info: dict[str, str]
    train: np.ndarray | None = None
    validation: np.ndarray | None = None
    task: str | None = None

    def batch(self, batch_size: int, length: int, seed: int, step: int, rank: int = 0,
              world_size: int = 1) -> tuple[Tensor, Tensor]:
        """Inputs and targets (B, T) for training step ``step`` on process ``rank``."""
        if self.task is not None:
            return task_batch(self.task, batch_size, length, seed, step, rank, world_size)
        return sample_windows(self.train, batch_size, length, seed, step, rank, world_size)

    def validation_set(self, n: int, length: int, seed: int) -> tuple[Tensor, Tensor]:
        """A fixed set of ``n`` validation examples (N, T) for a comparable loss."""
        if self.task is not None:
            b = make_task(self.task, n, length, seed=(seed, _VALIDATION_STEP))
            return b.inputs, b.targets
        return fixed_windows(self.validation, n, length)


def prepare_data(data: str | None, tokenizer: str | Tokenizer, task: str | None,
                 train_len: int, cache_dir: str | Path | None = None) -> TrainData:
    """Load the corpus (or task), build or take the tokenizer and map the cached streams.

    Raises ValueError when a split is shorter than one window of ``train_len + 1`` tokens.
    """
    if task is not None:
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
    return TrainData(tokenizer=tok, corpus_info=corpus.info(), train=train,
                     validation=validation)
