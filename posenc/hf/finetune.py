"""A short fine-tune at the extended length, as position interpolation (about 1000 steps) and
YaRN (about 400 steps) do after changing the frequencies.

Next-token loss on random windows of ``length`` tokens from a token stream, AdamW with a
linear warm-up, gradient clipping. Works on any device; on a CPU it is meant for tiny models
(a real model at 16k tokens wants a GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import UserError


@dataclass(frozen=True)
class FinetuneConfig:
    """steps: optimizer steps; length: tokens per window; batch_size: windows per step."""

    steps: int
    length: int
    lr: float = 2e-5
    batch_size: int = 1
    warmup: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "length", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"finetune {name} must be an integer >= 1, got {value!r}")
        if self.length < 2:
            raise UserError(f"finetune length must be >= 2, got {self.length}")
        if not self.lr > 0:
            raise UserError(f"finetune lr must be > 0, got {self.lr!r}")
        if self.warmup < 0 or self.weight_decay < 0 or self.grad_clip <= 0:
            raise UserError("finetune warmup and weight_decay must be >= 0 and grad_clip > 0")


def finetune(model: nn.Module, tokens: Tensor, config: FinetuneConfig,
             progress: Callable[[int], None] | None = None) -> list[float]:
    """Train ``model`` in place; return the loss of every step. The model ends in eval mode.

    ``tokens`` is a 1-D stream with at least ``config.length`` tokens; windows start at
    random offsets drawn from a generator seeded with ``config.seed``.
    """
    if tokens.dim() != 1 or tokens.numel() < config.length:
        raise UserError(f"finetune needs a 1-D stream of at least {config.length} tokens, got "
                         f"shape {tuple(tokens.shape)}")
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    warm = max(1, config.warmup)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    gen = torch.Generator().manual_seed(config.seed)
    starts_max = tokens.numel() - config.length + 1
    losses = []
    model.train()
    try:
        for _ in range(config.steps):
            starts = torch.randint(starts_max, (config.batch_size,), generator=gen)
            ids = torch.stack([tokens[s:s + config.length] for s in starts.tolist()])  # (B, L)
            ids = ids.long().to(device)
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if progress is not None:
                progress(1)
    finally:
        model.eval()
        opt.zero_grad(set_to_none=True)
    return losses
