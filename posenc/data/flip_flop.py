"""The flip-flop language: remember one bit across distractions (a state-tracking task).

Liu, Ash, Goel, Krishnamurthy and Zhang, "Exposing Attention Glitches with Flip-Flop
Language Modeling", NeurIPS 2023, Definition 1 and section 3: a string is a sequence of
instruction-bit pairs; the instruction is ``w`` (write the bit), ``i`` (ignore it) or ``r``
(read: the bit must be the last one written). The first instruction is a write and the last a
read; the others are drawn independently with probabilities (p_w, p_i, p_r) =
((1 - p_i) / 2, p_i, (1 - p_i) / 2), and the bits of writes and ignores are uniform. The
paper's distributions FFL(p_i): the training one p_i = 0.8, the sparse out-of-distribution
one p_i = 0.98 (reads far from their write) and the dense one p_i = 0.1; strings of T = 512
tokens. A model is scored on the read bits only (the rest is random): the paper counts the
wrong reads ("glitches").

Here the strings are written in bytes (``w``, ``i``, ``r``, ``0``, ``1``; ``#`` pads the
start to an even count), so an example of any length is drawn from the same FFL(p_i); the
task study scores a model by exact match (every read of an example right) and by the share
of reads right.
"""

from __future__ import annotations

import numpy as np

PAD = ord("#")
WRITE, IGNORE, READ = 0, 1, 2
#: byte of each instruction (index: WRITE, IGNORE, READ) and of the bits 0 and 1
INSTRUCTION_BYTES = np.array([ord("w"), ord("i"), ord("r")])
BIT_BYTES = np.array([ord("0"), ord("1")])
#: p_i of the paper's training distribution FFL(0.8) and of its sparse test FFL(0.98)
P_IGNORE_TRAIN = 0.8
P_IGNORE_SPARSE = 0.98
#: the shortest string: one write and one read, each with its bit
MIN_TOKENS = 4


def flip_flop(rng: np.random.Generator, n: int, tokens: int, p_ignore: float
              ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` strings of FFL(``p_ignore``) of ``tokens`` bytes each (``#``-padded at the
    start when ``tokens`` is odd).

    Returns the bytes (n, tokens) and which of them are read bits (n, tokens) bool: the
    scored positions.
    """
    if not 0.0 <= p_ignore < 1.0:
        raise ValueError(f"p_ignore must be in [0, 1), got {p_ignore}")
    pairs = tokens // 2
    if pairs < 2:
        raise ValueError(f"a flip-flop string needs at least {MIN_TOKENS} tokens, got {tokens}")
    other = (1.0 - p_ignore) / 2
    ops = rng.choice(3, size=(n, pairs), p=[other, p_ignore, other])
    ops[:, 0], ops[:, -1] = WRITE, READ
    bits = rng.integers(0, 2, size=(n, pairs))
    index = np.broadcast_to(np.arange(pairs), (n, pairs))
    last_write = np.maximum.accumulate(np.where(ops == WRITE, index, -1), axis=1)  # >= 0
    reads = ops == READ
    bits = np.where(reads, np.take_along_axis(bits, last_write, axis=1), bits)
    body = np.stack([INSTRUCTION_BYTES[ops], BIT_BYTES[bits]], axis=2).reshape(n, 2 * pairs)
    scored = np.stack([np.zeros_like(reads), reads], axis=2).reshape(n, 2 * pairs)
    pad = tokens - 2 * pairs                                      # 0 or 1
    seqs = np.concatenate([np.full((n, pad), PAD), body], axis=1)
    scored = np.concatenate([np.zeros((n, pad), dtype=bool), scored], axis=1)
    return seqs, scored


def read_answers(seqs: np.ndarray) -> list[list[int]]:
    """What each read must answer, recomputed by running the flip-flop on each string
    (bytes (n, tokens)): a plain loop, for checking :func:`flip_flop`."""
    answers = []
    for row in seqs:
        text = bytes(int(b) for b in row).decode("ascii").lstrip("#")
        memory, out = None, []
        for op, bit in zip(text[0::2], text[1::2]):
            if op == "w":
                memory = int(bit)
            elif op == "r":
                out.append(memory)
        answers.append(out)
    return answers
