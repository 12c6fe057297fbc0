"""Teacher-forced training of an encoder-decoder on a sequence-to-sequence task.

Step ``s`` draws a source length from ``cfg.min_len..cfg.max_len`` and a batch of the task
(:func:`posenc.data.synthetic.make_seq2seq_task`: BOS, answer, EOS) from ``(seed, s)``; the
loss is :meth:`~posenc.models.seq2seq.Seq2SeqTransformer.loss`, cross-entropy of every target
token given the source and the target prefix. The loop itself (optimizer, schedule,
clipping) is :func:`posenc.train.task_loop.fit`.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from ..errors import UserError
from .task_loop import FitResult, TaskTrainConfig, fit


def train_seq2seq(model: nn.Module, task: str, cfg: TaskTrainConfig,
                  on_step: Callable[[int], None] | None = None) -> FitResult:
    """Train ``model`` (a Seq2SeqTransformer) on ``task`` ("reverse" or "sort")."""
    from ..data.synthetic import make_seq2seq_task
    make_seq2seq_task(task, 1, cfg.min_len, 0)              # unknown task -> UserError
    needed = cfg.max_len + 1                                # BOS + answer fed to the decoder
    if getattr(model.config, "max_len", needed) < needed:
        raise UserError(f"model max_len={model.config.max_len} is shorter than the longest "
                         f"decoder input ({needed} = max_len + BOS)")
    device = next(model.parameters()).device

    def loss_at(step: int) -> Tensor:
        batch = make_seq2seq_task(task, cfg.batch_size, cfg.length_at(step),
                                  seed=(cfg.seed, step))
        return model.loss(batch.src.to(device), batch.tgt.to(device))

    return fit(model, loss_at, cfg, on_step)
