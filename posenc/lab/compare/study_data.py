"""The data of a comparison, prepared once: corpus, tokenizer and token streams.

Every run of a comparison trains on the same corpus with the same tokenizer, and every run
is evaluated on the same test split; :func:`prepare_study_data` loads the corpus and builds
(or reads the cached) tokenizer once, and :func:`posenc.train.loop.train` takes the
prepared training streams as they are instead of loading them again per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...data.batches import TrainData, check_stream_length
from ...data.cache import default_cache_dir, token_stream
from ...data.corpora import load_corpus
from ...data.tokenizer import Tokenizer, build_tokenizer
from ...eval.lengths import eval_device
from ...train.config import TrainConfig


@dataclass(frozen=True)
class StudyData:
    """``train``: what every run trains on (tokenizer, corpus info, train and validation
    streams); ``test``: the test split's token stream (N,), which runs are evaluated on."""

    train: TrainData
    test: np.ndarray

    @property
    def tokenizer(self) -> Tokenizer:
        return self.train.tokenizer

    @property
    def vocab_size(self) -> int:
        return self.train.tokenizer.vocab_size

    @property
    def corpus_info(self) -> dict[str, str]:
        """``Corpus.info()``: name, Python version and the content hash (sha256)."""
        return self.train.corpus_info


def prepare_study_data(train: TrainConfig) -> StudyData:
    """Load ``train.data`` and build ``train.tokenizer`` once; map the three splits' token
    streams (cached on disk). Raises when a training split is shorter than one window."""
    cache_dir = Path(train.cache_dir).expanduser() if train.cache_dir else default_cache_dir()
    corpus = load_corpus(train.data)
    tokenizer = build_tokenizer(train.tokenizer, corpus, cache_dir)
    streams = {split: token_stream(corpus, tokenizer, split, cache_dir)
               for split in ("train", "validation", "test")}
    for split in ("train", "validation"):
        check_stream_length(streams[split], train.train_len, split)
    return StudyData(TrainData(tokenizer=tokenizer, corpus_info=corpus.info(),
                               train=streams["train"], validation=streams["validation"]),
                     streams["test"])


def study_device(train: TrainConfig) -> str:
    """Where a study's models run: ``train.device``, the GPU when there is one for auto."""
    return eval_device() if train.device == "auto" else train.device
