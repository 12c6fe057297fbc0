"""Synthetic length-generalization tasks, generated on the fly from a seed at any length.

Every task is written in bytes (ids 0..255, the byte tokenizer's vocabulary), so a model
trained on text with ``--tokenizer byte`` can also be trained or tested on tasks. An example
of length T is a sequence s of T + 1 bytes; ``inputs = s[:-1]`` and ``targets = s[1:]`` with
-100 everywhere except the answer, so teacher-forced accuracy is
``(logits.argmax(-1) == targets)`` over the scored positions.

=========  ==========================================  ==================================
task       sequence (``#`` pads the start to length)   scored
=========  ==========================================  ==================================
copy       ``#qwerty=qwerty``                          the copy after ``=``
reverse    ``#qwerty=ytrewq``                          the reversal after ``=``
addition   ``##123+989=1112``  (answer has d+1 digits) the sum after ``=``
passkey    filler, ``The pass key is 48213. ...``      the key's digits at the end
           at a chosen depth, filler, question
recall     ``#c4a7c4x1=a7``  (key-value pairs, then    the value after the query key
           a query key)
selective  ``q..w.e...r..=qwer``  (4 letters among     the letters after ``=``, in order
_copy      blanks ``.``)
flip_flop  ``w1i0i1r1w0i1r0``  (write, ignore, read     the bit after each ``r``
           instructions with bits; FFL(p_i = 0.8))
flip_flop  the same, FFL(p_i = 0.98): reads far from    the bit after each ``r``
_sparse    their write
=========  ==========================================  ==================================

Copy and reverse use ``T // 2`` letters, addition ``(T - 2) // 3`` digits per operand,
recall ``(T - 2) // 2`` key-value pairs (associative recall, Ba et al. 2016; Arora et al.
2023): each example draws a mapping from letters to digits and lists pairs of it, keys
repeating with the same value once the pairs outnumber the letters, then asks for the value
of one listed key;
selective copy (Gu and Dao 2023; Golovneva et al. 2024, who show position by count solves it)
hides ``SELECTIVE_LETTERS`` letters at random places among ``T - 2 * SELECTIVE_LETTERS``
blanks and asks for them in order: the answer keeps its length while longer inputs only add
blanks (sparser, as the paper's out-of-distribution test), and the i-th answer letter is the
i-th non-blank, at no fixed distance;
passkey fills the rest of the length with repeated filler sentences and hides the key at
``depth`` (0 = start, 1 = just before the question; random per example when None);
flip-flop is the language of Liu et al. (NeurIPS 2023; :mod:`posenc.data.flip_flop`), whose
reads answer the last written bit: a state kept across any distance, scored at every read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import UserError
from .flip_flop import MIN_TOKENS, P_IGNORE_SPARSE, P_IGNORE_TRAIN, flip_flop

TASKS = ("copy", "reverse", "addition", "passkey", "recall", "selective_copy", "flip_flop",
         "flip_flop_sparse")
#: p_i of each flip-flop task (Liu et al. 2023's FFL(p_i))
FLIP_FLOP_P_IGNORE = {"flip_flop": P_IGNORE_TRAIN, "flip_flop_sparse": P_IGNORE_SPARSE}
#: a task's out-of-distribution test: the same language drawn otherwise (Liu et al. train on
#: FFL(0.8) and test on the sparse FFL(0.98)); the task study scores a model trained on the
#: key on the value too
OUT_OF_DISTRIBUTION = {"flip_flop": "flip_flop_sparse"}
IGNORE = -100
PAD, SEP, BLANK = ord("#"), ord("="), ord(".")
#: letters to copy in a selective-copy example, whatever its length
SELECTIVE_LETTERS = 4
FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
          "There and back again. ")
QUESTION = " What is the pass key? The pass key is "


def _key_sentence(key: str) -> str:
    return f" The pass key is {key}. Remember it. {key} is the pass key. "


@dataclass(frozen=True)
class TaskBatch:
    """``n`` examples of one task at one length: inputs and targets (N, T) long.

    ``targets`` holds -100 where a position is not scored. ``depths`` (N,) is the relative
    position of the passkey (None for other tasks).
    """

    name: str
    inputs: Tensor
    targets: Tensor
    depths: Tensor | None = None

    @property
    def length(self) -> int:
        return self.inputs.shape[1]


def min_length(name: str, key_digits: int = 5) -> int:
    """The shortest length ``make_task`` accepts for task ``name``."""
    if name in ("copy", "reverse"):
        return 2
    if name == "recall":
        return 4
    if name == "selective_copy":
        return 2 * SELECTIVE_LETTERS
    if name == "addition":
        return 5
    if name == "passkey":
        return len(_key_sentence("0" * key_digits)) + len(QUESTION) + key_digits - 1
    if name in FLIP_FLOP_P_IGNORE:
        return MIN_TOKENS - 1                              # T + 1 tokens: write and read
    raise UserError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")


def make_task(name: str, n_examples: int, length: int, seed: int | tuple[int, ...], *,
              depth: float | None = None, key_digits: int | None = None) -> TaskBatch:
    """``n_examples`` examples of task ``name``, each ``length`` tokens, from ``seed``.

    ``depth`` and ``key_digits`` (default 5) apply to ``passkey`` only.
    """
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    if isinstance(n_examples, bool) or not isinstance(n_examples, int) or n_examples < 1:
        raise UserError(f"n_examples must be a positive int, got {n_examples!r}")
    if name != "passkey" and (depth is not None or key_digits is not None):
        raise UserError(f"depth and key_digits are options of the passkey task, not {name!r}")
    key_digits = 5 if key_digits is None else key_digits
    if isinstance(key_digits, bool) or not isinstance(key_digits, int) or key_digits < 1:
        raise UserError(f"key_digits must be a positive int, got {key_digits!r}")
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise UserError(f"depth must be in [0, 1], got {depth}")
    shortest = min_length(name, key_digits)
    if isinstance(length, bool) or not isinstance(length, int) or length < shortest:
        raise UserError(f"length for task {name!r} must be an int >= {shortest}, got {length!r}")
    seeds = (seed,) if isinstance(seed, int) else tuple(seed)
    rng = np.random.default_rng([TASKS.index(name), *seeds])
    if name in ("copy", "reverse"):
        seqs, start = _copy(rng, n_examples, length, reverse=name == "reverse")
    elif name == "addition":
        seqs, start = _addition(rng, n_examples, length)
    elif name == "recall":
        seqs, start = _recall(rng, n_examples, length)
    elif name == "selective_copy":
        seqs, start = _selective_copy(rng, n_examples, length)
    elif name in FLIP_FLOP_P_IGNORE:
        seqs, scored = flip_flop(rng, n_examples, length + 1, FLIP_FLOP_P_IGNORE[name])
        s = torch.from_numpy(seqs.astype(np.int64))              # (N, T + 1)
        targets = s[:, 1:].clone()
        targets[~torch.from_numpy(scored[:, 1:])] = IGNORE       # score the read bits only
        return TaskBatch(name, s[:, :-1].contiguous(), targets)
    else:
        seqs, start, depths = _passkey(rng, n_examples, length, depth, key_digits)
    s = torch.from_numpy(seqs.astype(np.int64))                  # (N, T + 1)
    inputs, targets = s[:, :-1], s[:, 1:].clone()
    targets[:, :start - 1] = IGNORE                              # score s[start:] only
    return TaskBatch(name, inputs.contiguous(), targets,
                     torch.from_numpy(depths) if name == "passkey" else None)


def _copy(rng: np.random.Generator, n: int, length: int, reverse: bool):
    k = length // 2                                    # 2k + 1 <= length + 1
    letters = rng.integers(ord("a"), ord("z") + 1, size=(n, k))
    answer = letters[:, ::-1] if reverse else letters
    pad = np.full((n, length + 1 - (2 * k + 1)), PAD)
    seqs = np.concatenate([pad, letters, np.full((n, 1), SEP), answer], axis=1)
    return seqs, length + 1 - k


def _addition(rng: np.random.Generator, n: int, length: int):
    d = (length - 2) // 3                              # d + 1 + d + 1 + (d + 1) <= length + 1
    a = rng.integers(0, 10, size=(n, d))
    b = rng.integers(0, 10, size=(n, d))
    digits = np.zeros((n, d + 1), dtype=np.int64)      # the sum, most significant first
    carry = np.zeros(n, dtype=np.int64)
    for i in range(d - 1, -1, -1):
        total = a[:, i] + b[:, i] + carry
        digits[:, i + 1], carry = total % 10, total // 10
    digits[:, 0] = carry
    zero = ord("0")
    pad = np.full((n, length + 1 - (3 * d + 3)), PAD)
    seqs = np.concatenate([pad, a + zero, np.full((n, 1), ord("+")), b + zero,
                           np.full((n, 1), SEP), digits + zero], axis=1)
    return seqs, length + 1 - (d + 1)


def _recall(rng: np.random.Generator, n: int, length: int):
    k = (length - 2) // 2                              # 2k pairs + SEP + query + value
    values = rng.integers(ord("0"), ord("9") + 1, size=(n, 26))     # letter -> digit
    keys = rng.integers(0, 26, size=(n, k))
    if k <= 26:                                        # distinct keys while they last
        keys = np.argsort(rng.random((n, 26)), axis=1)[:, :k]
    pairs = np.stack([keys + ord("a"), np.take_along_axis(values, keys, 1)], axis=2)
    query = keys[np.arange(n), rng.integers(0, k, size=n)]
    pad = np.full((n, length - 2 - 2 * k), PAD)
    seqs = np.concatenate([pad, pairs.reshape(n, 2 * k), np.full((n, 1), SEP),
                           (query + ord("a"))[:, None], values[np.arange(n), query][:, None]],
                          axis=1)
    return seqs, length


def _selective_copy(rng: np.random.Generator, n: int, length: int):
    k = SELECTIVE_LETTERS                              # k letters in a region of length - k
    region = length - k
    places = np.sort(np.argsort(rng.random((n, region)), axis=1)[:, :k], axis=1)
    letters = rng.integers(ord("a"), ord("z") + 1, size=(n, k))
    hidden = np.full((n, region), BLANK)
    np.put_along_axis(hidden, places, letters, axis=1)
    seqs = np.concatenate([hidden, np.full((n, 1), SEP), letters], axis=1)
    return seqs, length + 1 - k


def _passkey(rng: np.random.Generator, n: int, length: int, depth: float | None,
             key_digits: int):
    rows, depths = [], np.empty(n, dtype=np.float32)
    for i in range(n):
        key = "".join(str(x) for x in rng.integers(0, 10, size=key_digits))
        hidden = _key_sentence(key)
        n_filler = length + 1 - len(hidden) - len(QUESTION) - key_digits
        filler = (FILLER * (n_filler // len(FILLER) + 1))[:n_filler]
        d = float(rng.random()) if depth is None else depth
        cut = round(d * n_filler)
        text = filler[:cut] + hidden + filler[cut:] + QUESTION + key
        rows.append(np.frombuffer(text.encode("ascii"), dtype=np.uint8))
        depths[i] = cut / max(n_filler, 1)
    return np.stack(rows).astype(np.int64), length + 1 - key_digits, depths


# ------------------------------------------------------------ sequence-to-sequence tasks
SEQ2SEQ_TASKS = ("reverse", "sort")
BOS, EOS = ord("^"), ord("$")


@dataclass(frozen=True)
class Seq2SeqBatch:
    """``n`` source/target pairs: ``src`` (N, S) letters, ``tgt`` (N, S + 2) = BOS, the
    answer (the source reversed or sorted), EOS; teacher forcing predicts ``tgt[:, 1:]``
    from ``tgt[:, :-1]``."""

    name: str
    src: Tensor
    tgt: Tensor

    @property
    def length(self) -> int:
        return self.src.shape[1]


def make_seq2seq_task(name: str, n_examples: int, length: int,
                      seed: int | tuple[int, ...]) -> Seq2SeqBatch:
    """``n_examples`` sources of ``length`` random lowercase letters (byte ids) and their
    targets: ``reverse`` flips the source, ``sort`` sorts it (ties kept)."""
    if name not in SEQ2SEQ_TASKS:
        raise UserError(f"unknown sequence-to-sequence task {name!r}; valid tasks: "
                         f"{', '.join(SEQ2SEQ_TASKS)}")
    for what, value in (("n_examples", n_examples), ("length", length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{what} must be a positive int, got {value!r}")
    seeds = (seed,) if isinstance(seed, int) else tuple(seed)
    rng = np.random.default_rng([len(TASKS) + SEQ2SEQ_TASKS.index(name), *seeds])
    src = rng.integers(ord("a"), ord("z") + 1, size=(n_examples, length))
    answer = src[:, ::-1] if name == "reverse" else np.sort(src, axis=1)
    tgt = np.concatenate([np.full((n_examples, 1), BOS), answer,
                          np.full((n_examples, 1), EOS)], axis=1)
    return Seq2SeqBatch(name, torch.from_numpy(src.astype(np.int64)),
                        torch.from_numpy(tgt.astype(np.int64)))
