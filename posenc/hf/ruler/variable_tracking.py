"""RULER's variable tracking (VT; Hsieh et al. 2024, Sec. 3.2 "Multi-hop Tracing"; the
configuration vt of RULER's released scripts/synthetic.yaml: one chain of 4 hops in noise).

A chain "VAR A = 12345", "VAR B = VAR A", ... "VAR E = VAR D" (five random 5-letter names, a
5-digit value) is spread in order over lines of RULER's noise sentence; the question asks for
every variable assigned the value, and all five must be named (string match over all). As in
RULER, one solved example of the task (its own names and value, shorter noise) comes first;
its noise is a quarter of the room, at most about 500 tokens as RULER's example. The answer
prefix ends at "they are:" without RULER's trailing space, which a BPE tokenizer would
otherwise split from the first name.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any

from .prompt import RulerSample, RulerText, start_ids, token_ids, too_short

#: RULER's generation budget for variable tracking (tokens)
MAX_NEW = 30
HOPS = 4
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back " \
        "again.\n"
HEAD = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
QUESTION = ("\nQuestion: Find all variables that are assigned the value {value} in the text "
            "above. Answer: According to the chain(s) of variable assignment in the text "
            "above, {count} variables are assigned the value {value}, they are:")
#: the solved example's noise at most (tokens), as RULER's 500-token example
EXAMPLE_TOKENS = 500


@dataclass(frozen=True)
class Chain:
    """One chain: its variable names (first assigned the value), value and lines."""

    names: tuple[str, ...]
    value: str

    @classmethod
    def draw(cls, rng: random.Random) -> Chain:
        names: list[str] = []
        while len(names) < HOPS + 1:
            name = "".join(rng.choices(string.ascii_uppercase, k=5))
            names += [] if name in names else [name]
        return cls(tuple(names), str(rng.randint(10000, 99999)))

    def lines(self) -> list[str]:
        first = f"VAR {self.names[0]} = {self.value}\n"
        return [first] + [f"VAR {b} = VAR {a}\n" for a, b in zip(self.names, self.names[1:])]


def _task(tokenizer: Any, link: Chain, noise_lines: int, rng: random.Random) -> list[int]:
    """The task's token ids up to its answer: ``link``'s lines spread in order over
    ``noise_lines`` noise lines."""
    lines = link.lines()
    spots = set(rng.sample(range(noise_lines + len(lines)), len(lines)))
    noise, pending, body = token_ids(tokenizer, NOISE), iter(lines), []
    for i in range(noise_lines + len(lines)):
        body += token_ids(tokenizer, next(pending)) if i in spots else noise
    question = QUESTION.format(value=link.value, count=len(link.names))
    return token_ids(tokenizer, HEAD) + body + token_ids(tokenizer, question)


def vt_sample(family: str, tokenizer: Any, text: RulerText, length: int,
              rng: random.Random, index: int) -> RulerSample:
    """Sample ``index`` of variable tracking in ``length`` tokens (``text`` is not used: the
    noise is RULER's fixed sentence)."""
    noise = len(token_ids(tokenizer, NOISE))
    bos = start_ids(tokenizer)
    example, link = Chain.draw(rng), Chain.draw(rng)
    answer = token_ids(tokenizer, " " + " ".join(example.names) + "\n")
    bare = [len(_task(tokenizer, c, 0, rng)) for c in (example, link)]
    fixed = len(bos) + sum(bare) + len(answer) + MAX_NEW
    room = length - fixed
    if room < 2 * noise:
        raise too_short(family, length, fixed + 2 * noise)
    example_lines = max(1, min(EXAMPLE_TOKENS, room // 4) // noise)
    task_lines = (room - example_lines * noise) // noise
    ids = bos + _task(tokenizer, example, example_lines, rng) + answer + \
        _task(tokenizer, link, task_lines, rng)
    return RulerSample(tuple(ids), link.names, MAX_NEW)
