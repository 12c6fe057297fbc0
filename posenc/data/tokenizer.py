"""Tokenizers: byte-level (default) and byte-level BPE trained with Hugging Face ``tokenizers``.

Specs: ``"byte"`` (256 ids, one per byte; the NUL byte 0 separates documents, text files
with NUL bytes are not read as text) and ``"bpe:N"`` (a byte-level BPE with N ids, trained
on the corpus's train split and cached under ``cache_dir/tokenizers/``, so the next run with
the same corpus reuses it). A tokenizer saves to and loads from a directory
(``tokenizer_config.json`` + ``tokenizer.json`` for BPE), which is how a run keeps its own.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError
from ..runio import atomic_write

if TYPE_CHECKING:
    from .corpora import Corpus

CONFIG_FILE = "tokenizer_config.json"
BPE_FILE = "tokenizer.json"
SEPARATOR = "<|endoftext|>"
BPE_MIN_VOCAB = 260
BPE_MAX_VOCAB = 1 << 20


class Tokenizer(ABC):
    """Text <-> token ids. ``sep_id`` is put between documents in a token stream."""

    spec: str
    vocab_size: int
    sep_id: int

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: list[int]) -> str: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    @property
    @abstractmethod
    def fingerprint(self) -> str:
        """Identifies the exact mapping (spec plus learned merges) for cache keys."""

    def save(self, directory: str | Path) -> None:
        """Write the tokenizer into ``directory`` (created if needed)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write(directory / CONFIG_FILE,
                     json.dumps({"spec": self.spec, "vocab_size": self.vocab_size,
                                 "sep_id": self.sep_id}, indent=2).encode())


class ByteTokenizer(Tokenizer):
    """One id per UTF-8 byte (vocab 256); decoding replaces invalid sequences with U+FFFD."""

    spec = "byte"
    vocab_size = 256
    sep_id = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        bad = [i for i in ids if not 0 <= int(i) < 256]
        if bad:
            raise UserError(f"byte token ids must be in [0, 256), got {bad[0]}")
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    @property
    def fingerprint(self) -> str:
        return "byte"


class BPETokenizer(Tokenizer):
    """A byte-level BPE (GPT-2 style pre-tokenization) from Hugging Face ``tokenizers``."""

    def __init__(self, tok, spec: str) -> None:
        self._tok = tok
        self.spec = spec
        self.vocab_size = tok.get_vocab_size()
        sep = tok.token_to_id(SEPARATOR)
        if sep is None:
            raise UserError(f"BPE tokenizer has no {SEPARATOR} token")
        self.sep_id = sep
        self._json = tok.to_str()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts)]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode([int(i) for i in ids])

    @property
    def fingerprint(self) -> str:
        return f"bpe{self.vocab_size}-{hashlib.sha256(self._json.encode()).hexdigest()[:12]}"

    def save(self, directory: str | Path) -> None:
        super().save(directory)
        atomic_write(Path(directory) / BPE_FILE, self._json.encode())


def parse_spec(spec: str) -> tuple[str, int | None]:
    """("byte", None) or ("bpe", N); UserError for anything else."""
    if spec == "byte":
        return "byte", None
    kind, _, size = spec.partition(":")
    if kind == "bpe":
        try:
            n = int(size)
        except ValueError:
            n = None
        if n is None or not BPE_MIN_VOCAB <= n <= BPE_MAX_VOCAB:
            raise UserError(f"tokenizer bpe:N needs N in [{BPE_MIN_VOCAB}, {BPE_MAX_VOCAB}],"
                             f" got {spec!r}")
        return "bpe", n
    raise UserError(f"unknown tokenizer {spec!r}; valid: byte, bpe:N (e.g. bpe:4096)")


def build_tokenizer(spec: str, corpus: Corpus, cache_dir: str | Path) -> Tokenizer:
    """The tokenizer ``spec`` for ``corpus``: BPE is trained once and cached per corpus hash."""
    kind, size = parse_spec(spec)
    if kind == "byte":
        return ByteTokenizer()
    where = Path(cache_dir) / "tokenizers" / f"{corpus.sha256[:16]}-bpe{size}"
    if (where / BPE_FILE).is_file():
        return load_tokenizer(where)
    tok = BPETokenizer(_train_bpe(corpus.texts("train"), size), spec)
    tok.save(where)
    return tok


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Load a tokenizer written by :meth:`Tokenizer.save`; UserError if it is unreadable."""
    directory = Path(directory)
    try:
        config = json.loads((directory / CONFIG_FILE).read_text())
        kind, _ = parse_spec(config["spec"])
        if kind == "byte":
            return ByteTokenizer()
        from tokenizers import Tokenizer as HFTokenizer
        return BPETokenizer(HFTokenizer.from_file(str(directory / BPE_FILE)), config["spec"])
    except Exception as err:  # noqa: BLE001 - any failure means an unreadable tokenizer
        line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"cannot load tokenizer from {directory}: {line}") from None


def _train_bpe(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[SEPARATOR],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok

