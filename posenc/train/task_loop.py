"""Training on synthetic tasks: a short loop for models that fit in seconds.

Each step draws a training length uniformly from ``min_len..max_len`` and a fresh batch from
``(seed, step)``, so a run is a pure function of its configuration and seed (the model is
initialised under ``torch.manual_seed(seed)``). The optimizer and schedule are the LM
loop's (:func:`posenc.train.loop.make_optimizer`, :func:`~posenc.train.loop.make_scheduler`:
AdamW without decay on norms and biases, linear warmup then cosine decay).
:func:`train_lm_task` trains a decoder-only model on a task of
:mod:`posenc.data.synthetic`; :mod:`posenc.train.seq2seq_loop` trains an encoder-decoder.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from torch import Tensor, nn

from ..encodings.checks import require_known_keys, require_positive_int
from ..errors import UserError
from .config import OptimizerSettings, check_optimizer
from .loop import lm_loss, make_optimizer, make_scheduler


@dataclass(frozen=True)
class TaskTrainConfig(OptimizerSettings):
    """Budget and optimizer of one task run; lengths are drawn from ``min_len..max_len``."""

    lr: float = 3e-3                        # the optimizer's fields: OptimizerSettings
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.98)
    steps: int = 1000
    batch_size: int = 32
    min_len: int = 2
    max_len: int = 16

    #: the key order of saved results
    DICT_ORDER = ("steps", "batch_size", "min_len", "max_len", "lr", "min_lr_ratio",
                  "warmup_steps", "weight_decay", "betas", "grad_clip", "seed")

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "min_len", "max_len"):
            require_positive_int(name, getattr(self, name))
        if self.min_len > self.max_len:
            raise UserError(f"min_len={self.min_len} must be <= max_len={self.max_len}")
        check_optimizer(self)

    @property
    def warmup(self) -> int:
        """Warmup steps: ``warmup_steps``, or a tenth of ``steps`` when that is None."""
        return self.steps // 10 if self.warmup_steps is None else self.warmup_steps

    def length_at(self, step: int) -> int:
        """The training length of step ``step`` (uniform in min_len..max_len)."""
        rng = np.random.default_rng([self.seed, step, 1])
        return int(rng.integers(self.min_len, self.max_len + 1))

    def to_dict(self) -> dict:
        return self.ordered_dict(self.DICT_ORDER)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskTrainConfig:
        data = require_known_keys("TaskTrainConfig", data, (f.name for f in fields(cls)))
        if "betas" in data:
            data["betas"] = tuple(data["betas"])
        return cls(**data)


@dataclass(frozen=True)
class FitResult:
    """Training losses (one per step) and the wall time of the loop."""

    losses: list[float]
    seconds: float


def fit(model: nn.Module, loss_at_step: Callable[[int], Tensor], cfg: TaskTrainConfig,
        on_step: Callable[[int], None] | None = None) -> FitResult:
    """Run ``cfg.steps`` optimizer steps on ``loss_at_step(step)`` (a scalar tensor)."""
    optimizer = make_optimizer(model, cfg)
    scheduler = make_scheduler(optimizer, cfg)
    clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
    model.train()
    losses, t0 = [], time.perf_counter()
    for step in range(cfg.steps):
        loss = loss_at_step(step)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if on_step is not None:
            on_step(step + 1)
    return FitResult(losses, time.perf_counter() - t0)


def train_lm_task(model: nn.Module, task: str, cfg: TaskTrainConfig,
                  on_step: Callable[[int], None] | None = None) -> FitResult:
    """Train a decoder-only model (``model(ids) -> logits``) on ``task``, scoring the answer
    positions only (:func:`posenc.data.synthetic.make_task`)."""
    from ..data.synthetic import make_task, min_length
    if cfg.min_len < min_length(task):
        raise UserError(f"min_len={cfg.min_len} is below task {task!r}'s shortest length "
                         f"{min_length(task)}")
    device = next(model.parameters()).device

    def loss_at(step: int) -> Tensor:
        batch = make_task(task, cfg.batch_size, cfg.length_at(step), seed=(cfg.seed, step))
        return lm_loss(model(batch.inputs.to(device)), batch.targets.to(device))

    return fit(model, loss_at, cfg, on_step)
