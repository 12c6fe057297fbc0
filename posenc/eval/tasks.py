"""Accuracy against length on the synthetic length-generalization tasks.

Each task (copy, reverse, addition, passkey, recall; :mod:`posenc.data.synthetic`) gives inputs
(N, T) and targets (N, T) with -100 where a position is not scored; the model is right at a
scored position when its argmax equals the target. Two numbers per length: token accuracy
over scored positions and exact match (every scored position of an example right).

An encoder-decoder is scored on the sequence-to-sequence tasks (reverse, sort;
:func:`~posenc.data.synthetic.make_seq2seq_task`) by greedy decoding: exact match when its
output equals the whole target (answer and EOS), token accuracy over the target's positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import UserError
from .lengths import NotEvaluated, SkippedNote, not_served

IGNORE = -100


@dataclass(frozen=True)
class TaskResult(SkippedNote):
    """Accuracy at one length; both None and ``skipped`` set when the model cannot run there
    (``note`` is its text)."""

    task: str
    length: int
    token_accuracy: float | None
    exact_match: float | None
    n_examples: int
    skipped: NotEvaluated | None = None

    def to_dict(self) -> dict:
        return {"token_accuracy": self.token_accuracy, "exact_match": self.exact_match,
                "n_examples": self.n_examples, "note": self.note}


@torch.no_grad()
def score_predictions(logits: torch.Tensor, targets: torch.Tensor) -> tuple[int, int, int]:
    """(correct scored tokens, scored tokens, examples fully right) for logits (N, T, V)."""
    pred = logits.argmax(dim=-1)                                  # (N, T)
    scored = targets != IGNORE
    right = (pred == targets) & scored
    exact = (right | ~scored).all(dim=1) & scored.any(dim=1)
    return int(right.sum()), int(scored.sum()), int(exact.sum())


@torch.no_grad()
def task_accuracy_at_lengths(model: nn.Module, task: str, lengths: Sequence[int], *,
                             n_examples: int = 64, seed: int = 0, batch_size: int = 16,
                             backend: str = "auto") -> list[TaskResult]:
    """Token accuracy and exact match of ``model`` on ``task`` at each length."""
    from ..data.synthetic import TASKS, make_task
    if task not in TASKS:
        raise UserError(f"unknown task {task!r}; valid tasks: {', '.join(TASKS)}")
    for name, value in (("n_examples", n_examples), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be an integer >= 1, got {value!r}")
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    was_training = model.training
    model.eval()
    out = []
    try:
        for length in sorted(set(lengths)):
            skipped = not_served(model, length)
            if skipped is not None:
                out.append(TaskResult(task, length, None, None, 0, skipped))
                continue
            batch = make_task(task, n_examples, length, seed)
            inputs, targets = batch.inputs.long(), batch.targets.long()
            if int(inputs.max()) >= vocab or int(targets.max()) >= vocab:
                raise UserError(f"task {task!r} uses token ids up to "
                                 f"{int(max(inputs.max(), targets.max()))}, past the model's "
                                 f"vocab_size={vocab}")
            right = total = exact = 0
            for i in range(0, inputs.shape[0], batch_size):
                logits = model(inputs[i:i + batch_size].to(device), backend=backend)
                r, t, e = score_predictions(logits.cpu(), targets[i:i + batch_size])
                right, total, exact = right + r, total + t, exact + e
            out.append(TaskResult(task, length, right / total if total else None,
                                  exact / inputs.shape[0], int(inputs.shape[0])))
    finally:
        model.train(was_training)
    return out


@torch.no_grad()
def seq2seq_accuracy_at_lengths(model: nn.Module, task: str, lengths: Sequence[int], *,
                                n_examples: int = 64, seed: int = 0,
                                batch_size: int = 64) -> list[TaskResult]:
    """Greedy-decoding token accuracy and exact match of an encoder-decoder on ``task``
    (``reverse`` or ``sort``) for sources of each length; the target is BOS, answer, EOS."""
    from ..data.synthetic import BOS, EOS, make_seq2seq_task
    for name, value in (("n_examples", n_examples), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be an integer >= 1, got {value!r}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        for length in sorted(set(lengths)):
            skipped = not_served(model, length + 1)      # the target runs to length + 1
            if skipped is not None:
                out.append(TaskResult(task, length, None, None, 0, skipped))
                continue
            batch = make_seq2seq_task(task, n_examples, length, seed)
            right = exact = 0
            for i in range(0, n_examples, batch_size):
                src, tgt = batch.src[i:i + batch_size], batch.tgt[i:i + batch_size, 1:]
                gen = model.generate(src.to(device), length + 1, bos_id=BOS,
                                     eos_id=EOS).cpu()[:, 1:]          # (B, <= length + 1)
                pred = torch.full_like(tgt, EOS)
                pred[:, :gen.shape[1]] = gen
                hit = pred == tgt                                       # (B, length + 1)
                right += int(hit.sum())
                exact += int(hit.all(dim=1).sum())
            out.append(TaskResult(task, length, right / (n_examples * (length + 1)),
                                  exact / n_examples, n_examples))
    finally:
        model.train(was_training)
    return out
