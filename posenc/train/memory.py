"""How much memory a training step needs at least, and how much there is: a batch that cannot
fit is refused with a one-line error before any allocation, not by the kernel's OOM killer."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import UserError
from .config import TrainConfig

GIB = 2**30


def available_memory(device: torch.device | str = "cpu") -> int:
    """Free bytes on ``device``: the GPU's free memory, or the kernel's MemAvailable (else the
    physical RAM) for the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def train_step_bytes(cfg: TrainConfig) -> int:
    """A lower bound of one training step's memory in bytes (fp32): the weights, gradients
    and AdamW's two moments, the logits and their gradient (B, T, V), and per layer the
    residual stream, q/k/v and the MLP's hidden activations kept for the backward."""
    m = cfg.model
    d, d_ff, v, layers = m.d_model, m.d_ff or 4 * m.d_model, m.vocab_size, m.n_layers
    params = v * d + layers * (4 * d * d + 2 * d * d_ff)
    tokens = cfg.batch_size * cfg.train_len
    per_token = 2 * v + layers * (6 * d + 2 * d_ff)
    return 4 * (4 * params + tokens * per_token) + 16 * tokens       # + int64 ids, targets


def validation_set_bytes(cfg: TrainConfig) -> int:
    """A lower bound of the host memory of the validation set in bytes: ``eval_windows``
    windows of int64 inputs, targets, document ids and the offsets they are read at."""
    return 8 * 4 * cfg.eval_windows * (cfg.train_len + 1)


def check_train_memory(cfg: TrainConfig, device: torch.device | str = "cpu",
                       limit: int | None = None) -> int:
    """ValueError if a step of ``cfg`` cannot fit in ``limit`` bytes (default: what
    :func:`available_memory` says), or its validation set in the host's memory; returns the
    estimate of a step."""
    need = train_step_bytes(cfg)
    free = available_memory(device) if limit is None else limit
    if need > free:
        raise UserError(f"batch_size={cfg.batch_size} x train_len={cfg.train_len} needs at "
                         f"least {need / GIB:,.1f} GiB per training step but "
                         f"{free / GIB:,.1f} GiB are free on {torch.device(device).type}; "
                         f"lower --batch-size or --train-len")
    host = validation_set_bytes(cfg)
    free = available_memory("cpu") if limit is None else limit
    if host > free:
        raise UserError(f"eval_windows={cfg.eval_windows} x train_len={cfg.train_len} needs at "
                        f"least {host / GIB:,.1f} GiB for the validation set but "
                        f"{free / GIB:,.1f} GiB are free; lower --eval-windows")
    return need
