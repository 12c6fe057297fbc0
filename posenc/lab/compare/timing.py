"""Training-step cost per encoding, measured the way speed claims need: repeated and interleaved.

One training run's tokens/s mixes the encoding's cost with whatever else the machine did
during that run. Here every encoding's model (the comparison's shape, fresh weights: the
cost does not depend on them) takes one full training step (forward, backward, AdamW) per
round, the encodings in a rotated order each round, after one untimed warm-up step each.
Each round also gives each encoding's time relative to the round's median, which cancels
load that changes between rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...errors import UserError


def time_training_steps(build: Callable[[str], torch.nn.Module], encodings: Sequence[str],
                        batch_size: int, length: int, vocab_size: int, rounds: int,
                        seed: int = 0) -> dict:
    """results.json's ``timing``: per encoding, seconds per training step in each round.

    ``build(encoding)`` returns a model (ids (B, T) -> logits (B, T, V)) in training mode.
    """
    if rounds < 1:
        raise UserError(f"rounds must be >= 1, got {rounds}")
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch_size, length + 1), generator=gen)
    x, y = ids[:, :-1], ids[:, 1:]
    steps = {}
    for enc in encodings:
        torch.manual_seed(seed)
        model = build(enc).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(model=model, opt=opt) -> float:
            start = time.perf_counter()
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return time.perf_counter() - start

        step()                                           # warm-up, untimed
        steps[enc] = step
    seconds: dict[str, list[float]] = {enc: [] for enc in encodings}
    relative: dict[str, list[float]] = {enc: [] for enc in encodings}
    order = list(encodings)
    for r in range(rounds):
        shift = r % len(order)
        this_round = {enc: steps[enc]() for enc in order[shift:] + order[:shift]}
        mid = statistics.median(this_round.values())
        for enc, s in this_round.items():
            seconds[enc].append(round(s, 5))
            relative[enc].append(round(s / mid, 4))
    return {"rounds": rounds, "batch_size": batch_size, "length": length,
            "step_seconds": seconds, "relative_to_median": relative}
