"""Typed configuration of a training run, and parsing of ``key=value`` options."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from ..data.corpora import resolve_corpus
from ..data.synthetic import TASKS
from ..data.tokenizer import parse_spec
from ..encodings.checks import (
    require_float_in,
    require_int_at_least,
    require_known_keys,
    require_positive_int,
    require_seed,
)
from ..errors import UserError
from ..models.lm import LMConfig

#: the device strings every machine understands; any string torch parses is accepted too
#: (``cuda:1``, ``mps``, ``xpu``): whether it exists is checked where the run starts
DEVICES = ("auto", "cpu", "cuda")


def check_device(device: object) -> None:
    """UserError unless ``device`` is "auto" or a device string torch parses (not "meta")."""
    if device == "auto":
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        parsed = None
    if parsed is None or parsed.type == "meta":
        raise UserError(f"device must be auto or a device string such as {', '.join(DEVICES[1:])}"
                        f", cuda:N, mps or xpu; got {device!r}")


@dataclass(frozen=True)
class OptimizerSettings:
    """AdamW (``lr``, ``weight_decay``, ``betas``), gradient clipping, the schedule (linear
    warmup for ``warmup_steps``, None: steps // 10, then cosine decay to ``min_lr_ratio`` x
    lr) and the seed: declared once for every training config (:class:`TrainConfig` of the
    language models, the task loop's ``TaskTrainConfig``, which sets its own defaults) and
    checked by :func:`check_optimizer`."""

    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int | None = None
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    seed: int = 0

    def ordered_dict(self, order: tuple[str, ...]) -> dict[str, Any]:
        """The fields as a dict, keys in ``order`` (the order saved files have always had;
        the optimizer's fields come first in the dataclass), betas as a list."""
        d = asdict(self)
        d["betas"] = list(self.betas)
        return {name: d[name] for name in order}


def check_optimizer(cfg: Any) -> None:
    """Check the optimizer, schedule and seed fields a training config has (``lr``,
    ``min_lr_ratio``, ``warmup_steps``, ``weight_decay``, ``betas``, ``grad_clip``, ``seed``):
    the checks :class:`TrainConfig` and the task loop's config share."""
    require_seed("seed", cfg.seed)
    if cfg.warmup_steps is not None:
        require_int_at_least("warmup_steps", cfg.warmup_steps, 0)
    require_float_in("lr", cfg.lr, 0.0, math.inf)
    require_float_in("min_lr_ratio", cfg.min_lr_ratio, 0.0, 1.0, low_open=False,
                     high_open=False)
    require_float_in("weight_decay", cfg.weight_decay, 0.0, math.inf, low_open=False)
    require_float_in("grad_clip", cfg.grad_clip, 0.0, math.inf, low_open=False)
    if len(cfg.betas) != 2:
        raise UserError(f"betas must be two floats in [0, 1), got {cfg.betas!r}")
    for i, b in enumerate(cfg.betas):
        require_float_in(f"betas[{i}]", b, 0.0, 1.0, low_open=False)


@dataclass(frozen=True)
class TrainConfig(OptimizerSettings):
    """Everything that determines a training run (and so its loss curve).

    ``model.max_len`` must be at least ``train_len`` (it is the learned table size and the
    original length of RoPE scalings, so normally equal). ``model.vocab_size`` must cover the
    tokenizer's vocabulary (256 for ``byte``). ``task`` trains on a synthetic task instead of
    ``data``. ``batch_size`` is per process; under DDP the global batch is
    ``batch_size * world_size``. ``eval_every`` / ``checkpoint_every`` 0 mean "at the end
    only". ``cache_dir`` None means posenc's cache folder (:func:`posenc.paths.cache_dir`).
    ``skip_bad_steps`` is how many steps with a non-finite loss or gradient may be skipped
    (no update) before the run stops as diverged (0: the first one stops it). ``pack`` trains
    on packed documents: a window's documents restart at position 0, attend only to
    themselves, and the token after a document's end is not predicted
    (:mod:`posenc.data.batches`); text data only. ``compile`` runs the model's forward and
    backward through ``torch.compile`` (inductor); the weights and the schedule are the same,
    the numbers equal eager ones up to rounding (BENCHMARKS.md: when it pays for its compile
    time). ``scaffold_pe`` (None: off) trains the first ``scaffold_steps`` steps with that
    encoding in place of the model's own, then drops it and goes on with the model's own
    (``nope`` for DroPE), same optimizer, schedule and length; the saved model is the
    model's own (:func:`check_scaffold`).
    """

    model: LMConfig = field(default_factory=LMConfig)
    data: str | None = None
    tokenizer: str = "byte"
    train_len: int = 128
    batch_size: int = 16
    steps: int = 600
    bf16: bool = False
    eval_every: int = 0
    eval_windows: int = 16
    checkpoint_every: int = 100
    task: str | None = None
    cache_dir: str | None = None
    device: str = "auto"
    skip_bad_steps: int = 0
    pack: bool = False
    compile: bool = False
    scaffold_pe: str | None = None
    scaffold_steps: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.model, LMConfig):
            raise UserError(f"model must be an LMConfig, got {type(self.model).__name__}")
        for name in ("train_len", "batch_size", "steps", "eval_windows"):
            require_positive_int(name, getattr(self, name))
        for name in ("eval_every", "checkpoint_every", "skip_bad_steps"):
            require_int_at_least(name, getattr(self, name), 0)
        check_optimizer(self)
        if self.train_len < 2:
            raise UserError(f"train_len must be an integer >= 2, got {self.train_len}")
        if self.model.max_len < self.train_len:
            raise UserError(f"model max_len={self.model.max_len} is smaller than "
                             f"train_len={self.train_len}")
        if self.warmup_steps is not None and 0 < self.steps <= self.warmup_steps:
            raise UserError(f"warmup_steps must be < steps={self.steps}, "
                             f"got {self.warmup_steps}")
        parse_spec(self.tokenizer)
        if self.task is not None:
            if self.task not in TASKS:
                raise UserError(f"unknown task {self.task!r}; valid tasks: {', '.join(TASKS)}")
            if self.data is not None:
                raise UserError("give either task or data, not both")
            if self.tokenizer != "byte":
                raise UserError(f"synthetic tasks are written in bytes: tokenizer must be "
                                 f"'byte', got {self.tokenizer!r}")
            if self.pack:
                raise UserError(f"pack is for text data: the examples of task "
                                 f"{self.task!r} are single documents already")
        check_device(self.device)
        for name in ("bf16", "pack", "compile"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.scaffold_pe is not None:
            check_scaffold(self)

    @property
    def warmup(self) -> int:
        """Warmup steps: ``warmup_steps``, or a tenth of ``steps`` when that is None."""
        return self.steps // 10 if self.warmup_steps is None else self.warmup_steps

    @property
    def tokens_per_step(self) -> int:
        """Tokens one process trains on per step."""
        return self.batch_size * self.train_len

    #: the key order of a saved config.json
    DICT_ORDER = ("model", "data", "tokenizer", "train_len", "batch_size", "steps", "lr",
                  "min_lr_ratio", "warmup_steps", "weight_decay", "betas", "grad_clip",
                  "seed", "bf16", "eval_every", "eval_windows", "checkpoint_every", "task",
                  "cache_dir", "device", "skip_bad_steps", "pack", "compile")

    def to_dict(self) -> dict[str, Any]:
        d = self.ordered_dict(self.DICT_ORDER)
        d["model"] = self.model.to_dict()
        if self.scaffold_pe is not None:       # saved only when set (older configs read alike)
            d.update(scaffold_pe=self.scaffold_pe, scaffold_steps=self.scaffold_steps)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        data = require_known_keys("TrainConfig", data, (f.name for f in fields(cls)))
        if isinstance(data.get("model"), dict):
            data["model"] = LMConfig.from_dict(data["model"])
        if "betas" in data:
            data["betas"] = tuple(data["betas"])
        return cls(**data)

    def resolved(self) -> TrainConfig:
        """A copy whose local ``data`` and ``cache_dir`` paths are absolute, so the run can be
        evaluated or resumed from any working directory; corpus names and ``hf:`` names stay
        as they are (:func:`~posenc.data.corpora.resolve_corpus`: ``prose`` is the essays
        even where a folder ``prose`` exists, which is ``./prose``)."""
        changes: dict[str, Any] = {}
        kind, data = resolve_corpus(self.data)
        if kind == "path" and data != self.data:
            changes["data"] = data
        if self.cache_dir is not None:
            changes["cache_dir"] = str(Path(self.cache_dir).expanduser().resolve())
        return replace(self, **changes) if changes else self

    def with_model(self, **changes: Any) -> TrainConfig:
        """A copy with ``model`` fields replaced (e.g. ``vocab_size`` from a tokenizer)."""
        return replace(self, model=replace(self.model, **changes))

    def differences(self, other: TrainConfig) -> list[str]:
        """Names of the fields (``model.x`` for model fields) that differ from ``other``."""
        a, b = _flatten(self.to_dict()), _flatten(other.to_dict())
        return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


#: encodings a scaffold may be (parameter-free, so dropping it leaves the weights as they are)
SCAFFOLDS = ("rope",)


def check_scaffold(cfg: TrainConfig) -> None:
    """UserError unless ``scaffold_pe`` can train the first ``scaffold_steps`` steps in place
    of the model's own encoding (DroPE: Gelberg et al. 2026, ICLR 2026, Sec. 4): RoPE, a
    model without a layer plan whose own encoding has no parameters either, and
    0 < scaffold_steps < steps."""
    from ..encodings import encoding_class
    if cfg.scaffold_pe not in SCAFFOLDS:
        raise UserError(f"scaffold_pe must be one of {', '.join(SCAFFOLDS)}, got "
                        f"{cfg.scaffold_pe!r}")
    require_int_at_least("scaffold_steps", cfg.scaffold_steps, 1)
    if cfg.scaffold_steps >= cfg.steps:
        raise UserError(f"scaffold_steps must be < steps={cfg.steps}, got "
                        f"{cfg.scaffold_steps}")
    own = encoding_class(cfg.model.pe)
    if cfg.model.plan is not None or own.per_layer or own.family not in ("none", "rotary") \
            or own.hook_kinds() not in ([], ["transform_qk"]):
        raise UserError(f"a scaffold replaces one parameter-free encoding shared by every "
                        f"layer; the model's {cfg.model.pe!r} (plan {cfg.model.plan!r}) is "
                        "not one")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k == "model":
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = json.dumps(v, sort_keys=True)
    return out


def parse_value(text: str) -> Any:
    """A command-line value: JSON if it parses (numbers, true/false/null, lists), else text."""
    lowered = {"true": True, "false": False, "none": None, "null": None}
    if text.lower() in lowered:
        return lowered[text.lower()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_options(items: list[str] | None, what: str = "option") -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}``; UserError for an item without ``=``."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{what} must be key=value, got {item!r}")
        if key in out:
            raise UserError(f"{what} {key!r} given twice")
        out[key] = parse_value(value)
    return out
