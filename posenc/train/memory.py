"""How much memory a training step or a generation needs at least, and how much there is: a
job that cannot fit is refused with a one-line error before any allocation (naming the option
that makes it too large), not by the kernel's OOM killer or a failed 100 TB allocation."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import UserError
from ..models.lm import LMConfig
from .config import TrainConfig

GIB = 2**30
#: the options whose size :func:`train_step_bytes` counts, as the command line names them
SIZE_OPTIONS = ("batch_size", "train_len", "vocab_size", "d_model", "d_ff", "n_layers")


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


def _sizes(cfg: TrainConfig) -> dict[str, int]:
    m = cfg.model
    return {"batch_size": cfg.batch_size, "train_len": cfg.train_len,
            "vocab_size": m.vocab_size, "d_model": m.d_model,
            "d_ff": m.d_ff or 4 * m.d_model, "n_layers": m.n_layers}


def _step_bytes(batch_size: int, train_len: int, vocab_size: int, d_model: int, d_ff: int,
                n_layers: int) -> int:
    d, v = d_model, vocab_size
    params = v * d + n_layers * (4 * d * d + 2 * d * d_ff)
    tokens = batch_size * train_len
    per_token = 2 * v + n_layers * (6 * d + 2 * d_ff)
    return 4 * (4 * params + tokens * per_token) + 16 * tokens       # + int64 ids, targets


def train_step_bytes(cfg: TrainConfig) -> int:
    """A lower bound of one training step's memory in bytes (fp32): the weights, gradients
    and AdamW's two moments, the logits and their gradient (B, T, V), and per layer the
    residual stream, q/k/v and the MLP's hidden activations kept for the backward."""
    return _step_bytes(**_sizes(cfg))


def _defaults(sizes: dict[str, int]) -> dict[str, int]:
    """The default of each size option (d_ff's: 4 x d_model)."""
    train, model = TrainConfig(), LMConfig()
    return {"batch_size": train.batch_size, "train_len": train.train_len,
            "vocab_size": model.vocab_size, "d_model": model.d_model,
            "d_ff": 4 * sizes["d_model"], "n_layers": model.n_layers}


def largest_cost(cfg: TrainConfig) -> list[str]:
    """The options (``--batch-size``, ``--d-model``, ...) to lower first: those whose value
    set back to its default saves the most of :func:`train_step_bytes` (several when they
    save about as much), or, where every option is at or below its default, whose halving
    does. ``--d-ff`` only when it was given (by default it follows ``--d-model``)."""
    sizes = _sizes(cfg)
    need = _step_bytes(**sizes)
    names = [n for n in SIZE_OPTIONS if n != "d_ff" or cfg.model.d_ff is not None]

    def saved(name: str, value: int) -> int:
        smaller = dict(sizes, **{name: value})
        if name == "d_model" and cfg.model.d_ff is None:
            smaller["d_ff"] = 4 * value
        return need - _step_bytes(**smaller)

    defaults = _defaults(sizes)
    savings = {n: saved(n, min(sizes[n], defaults[n])) for n in names}
    if max(savings.values()) <= 0:
        savings = {n: saved(n, max(1, sizes[n] // 2)) for n in names}
    best = max(savings.values())
    return ["--" + n.replace("_", "-") for n in names if savings[n] >= 0.99 * best]


def validation_set_bytes(cfg: TrainConfig) -> int:
    """A lower bound of the host memory of the validation set in bytes: ``eval_windows``
    windows of int64 inputs, targets, document ids and the offsets they are read at."""
    return 8 * 4 * cfg.eval_windows * (cfg.train_len + 1)


def check_train_memory(cfg: TrainConfig, device: torch.device | str = "cpu",
                       limit: int | None = None) -> int:
    """UserError if a step of ``cfg`` cannot fit in ``limit`` bytes (default: what
    :func:`available_memory` says), naming the option that costs the most, or its validation
    set in the host's memory; returns the estimate of a step."""
    need = train_step_bytes(cfg)
    limit = available_memory(device) if limit is None else limit
    if need > limit:
        sizes = ", ".join(f"{k}={v}" for k, v in _sizes(cfg).items())
        raise UserError(f"a training step ({sizes}) needs at least {need / GIB:,.1f} GiB but "
                        f"{limit / GIB:,.1f} GiB are free on {torch.device(device).type}; "
                        f"lower {' or '.join(largest_cost(cfg))}")
    host = validation_set_bytes(cfg)
    free = available_memory("cpu") if limit is None else limit
    if host > free:
        raise UserError(f"eval_windows={cfg.eval_windows} x train_len={cfg.train_len} needs at "
                        f"least {host / GIB:,.1f} GiB for the validation set but "
                        f"{free / GIB:,.1f} GiB are free; lower --eval-windows")
    return need


def generation_bytes(model: LMConfig, batch: int, capacity: int,
                     dtype: torch.dtype = torch.float32) -> int:
    """A lower bound of the memory in bytes to generate with ``model`` up to ``capacity``
    tokens per sequence: the weights and, per layer, the KV cache (keys and values
    (B, H, capacity, D) in ``dtype``, int64 positions and a bool mask (B, capacity))."""
    size = torch.empty((), dtype=dtype).element_size()
    d, d_ff = model.d_model, model.d_ff or 4 * model.d_model
    params = model.vocab_size * d + model.n_layers * (4 * d * d + 2 * d * d_ff)
    per_position = model.n_layers * batch * (2 * d * size + 8 + 1)
    return size * params + capacity * per_position


def check_generation_memory(model: LMConfig, batch: int, prompt_len: int, max_new: int,
                            dtype: torch.dtype = torch.float32,
                            device: torch.device | str = "cpu", *,
                            option: str = "--max-new-tokens", limit: int | None = None) -> int:
    """UserError naming ``option`` if generating ``max_new`` tokens after a prompt of
    ``prompt_len`` cannot fit in ``limit`` bytes (default: what :func:`available_memory`
    says), with how many new tokens would; returns the estimate."""
    need = generation_bytes(model, batch, prompt_len + max_new, dtype)
    limit = available_memory(device) if limit is None else limit
    if need > limit:
        fixed = generation_bytes(model, batch, 0, dtype)
        per_position = generation_bytes(model, batch, 1, dtype) - fixed
        fit = max(0, (limit - fixed) // per_position - prompt_len)
        raise UserError(f"{option} {max_new} needs a KV cache of at least {need / GIB:,.1f} "
                        f"GiB but {limit / GIB:,.1f} GiB are free on "
                        f"{torch.device(device).type}; at most {fit:,} new tokens fit")
    return need
