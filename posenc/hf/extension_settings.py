"""The settings of a context-extension measurement: what to measure (methods, factor,
lengths, passkey grid, fine-tuning), the checks made before any forward, the rows each method
gives. The study that measures them (units, resume, report) is :mod:`posenc.hf.extend_study`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import nn

from ..encodings.checks import require_distinct
from ..errors import UserError
from ..methods import parse_method_spec
from .extend import make_extension
from .finetune import FinetuneConfig
from .measure import check_memory
from .passkey import min_length

DEFAULT_METHODS = ("none", "linear", "ntk", "dynamic", "yarn")
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class ExtensionSettings:
    """What to measure. ``factor`` applies to every method but ``none``."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    factor: float = 2.0
    lengths: tuple[int, ...] = ()
    original: int | None = None
    stride: int | None = None
    max_windows: int = 2
    passkey: bool = False
    passkey_lengths: tuple[int, ...] = ()
    passkey_depths: tuple[float, ...] = DEFAULT_DEPTHS
    passkey_trials: int = 2
    finetune: FinetuneConfig | None = None
    memory_limit: int | None = None
    seed: int = 0
    method_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.methods:
            raise UserError("give at least one method")
        require_distinct("methods", self.methods)
        for name, values in (("lengths", self.lengths), ("passkey lengths",
                                                         self.passkey_lengths)):
            if any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in values):
                raise UserError(f"{name} must be integers >= 2, got {list(values)}")
        if not self.lengths:
            raise UserError("give at least one length")
        if self.max_windows < 1:
            raise UserError(f"windows must be >= 1, got {self.max_windows}")
        if self.stride is not None and not 1 <= self.stride <= min(self.lengths):
            raise UserError(f"stride must be in [1, shortest length {min(self.lengths)}], got "
                             f"{self.stride}")
        if any(not 0 <= d <= 1 for d in self.passkey_depths):
            raise UserError(f"passkey depths must be in [0, 1], got {list(self.passkey_depths)}")
        for name, values in (("lengths", self.lengths), ("passkey lengths",
                                                         self.passkey_lengths),
                             ("passkey depths", self.passkey_depths)):
            require_distinct(name, values)
        if self.passkey:
            if isinstance(self.passkey_trials, bool) or not isinstance(self.passkey_trials, int) \
                    or self.passkey_trials < 1:
                raise UserError(f"passkey trials must be an integer >= 1, got "
                                f"{self.passkey_trials!r}")
            if not self.passkey_depths:
                raise UserError("give at least one passkey depth")
            if not self.passkey_lengths:
                raise UserError("give at least one passkey length")

    def factor_for(self, method: str) -> float | None:
        return None if parse_method_spec(method).method.factor_rule == "none" else self.factor

    def options_for(self, method: str) -> dict[str, Any]:
        scaled = parse_method_spec(method).method.factor_rule != "none"
        return dict(self.method_options) if scaled else {}


def validate_settings(model: nn.Module, config: ExtensionSettings, tokenizer: Any = None) -> None:
    """Raise before any compute: bad methods or factors, lengths beyond memory, passkey
    lengths too short for the prompt."""
    for method in config.methods:
        make_extension(model.config, method, config.factor_for(method), config.original,
                       **config.options_for(method))
    if config.passkey and tokenizer is not None and config.passkey_lengths:
        shortest = min_length(tokenizer)
        if min(config.passkey_lengths) < shortest:
            raise UserError(f"passkey length {min(config.passkey_lengths)} is shorter than "
                             f"the passkey prompt without filler ({shortest} tokens)")
    param = next(model.parameters())
    check_memory(model.config, max(config.lengths + config.passkey_lengths), param.dtype,
                 config.memory_limit, param.device)


def row_names(model: nn.Module, config: ExtensionSettings, method: str) -> list[str]:
    """The rows ``method`` gives: its extension's name, and that name + "+ft" when the study
    fine-tunes (every method but ``none``)."""
    ext = make_extension(model.config, method, config.factor_for(method), config.original,
                         **config.options_for(method))
    tuned = config.finetune is not None and ext.method != "none"
    return [ext.name] + ([ext.name + "+ft"] if tuned else [])


def config_dict(config: ExtensionSettings) -> dict[str, Any]:
    out = asdict(config)
    out["finetune"] = None if config.finetune is None else asdict(config.finetune)
    return out


def default_lengths(native: int) -> tuple[int, ...]:
    """1x, 1.5x and 2x the native context."""
    return (native, native * 3 // 2, native * 2)

