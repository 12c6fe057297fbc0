"""The settings of a context-extension measurement: what to measure (methods, factor,
lengths, passkey grid, fine-tuning), the checks made before any forward, the rows each method
gives. The study that measures them (units, resume, report) is :mod:`posenc.hf.extend_study`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import nn

from ..encodings.checks import require_distinct, require_seed
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
    eval_windows: int = 2
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
        if isinstance(self.eval_windows, bool) or not isinstance(self.eval_windows, int) \
                or self.eval_windows < 1:
            raise UserError(f"eval_windows must be an integer >= 1, got {self.eval_windows!r}")
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
        require_seed("seed", self.seed)

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


#: results.json keys that name a field otherwise: ``eval_windows`` is stored as
#: ``max_windows``, the key results have always had
STORED_KEYS = {"eval_windows": "max_windows"}


def config_dict(config: ExtensionSettings) -> dict[str, Any]:
    """The config as results.json stores it (keys of :data:`STORED_KEYS` renamed)."""
    out = {STORED_KEYS.get(key, key): value for key, value in asdict(config).items()}
    out["finetune"] = None if config.finetune is None else asdict(config.finetune)
    return out


def default_lengths(native: int) -> tuple[int, ...]:
    """1x, 1.5x and 2x the native context."""
    return (native, native * 3 // 2, native * 2)


#: ``posenc extend --preset``: ``cpu`` extends from a short original length (the arena's cpu
#: preset) so a 2-core CPU measures it in minutes; ``gpu`` measures at the model's own context
#: (1x, 1.5x and 2x of it: 8192 to 16384 tokens for SmolLM2, minutes per forward on a CPU)
EXTEND_PRESETS: dict[str, dict[str, Any]] = {
    "cpu": {"original": 512, "multiples": (1, 2, 4)},
    "gpu": {"original": None, "multiples": None},
}
#: the cpu preset's wall time for ``posenc extend smollm2`` with the default methods on the
#: 2-core CPU machine (minutes, from an empty cache: GGUF conversion and model loading
#: included; None: not timed here), and the machine's state while it ran (2026-11-27)
EXTEND_PRESET_MINUTES: dict[str, float | None] = {"cpu": 18.9, "gpu": None}
EXTEND_PRESET_LOAD = "1-minute load average 5.3-8.3: other work on the machine"


def preset_lengths(preset: str, original: int | None, lengths: tuple[int, ...] | None
                   ) -> tuple[int | None, tuple[int, ...] | None]:
    """``(original, lengths)`` of ``preset`` where the caller gave none (None: the model's
    native context, and 1x, 1.5x and 2x of it)."""
    if preset not in EXTEND_PRESETS:
        raise UserError(f"unknown preset {preset!r}; valid presets: "
                        f"{', '.join(EXTEND_PRESETS)}")
    spec = EXTEND_PRESETS[preset]
    original = original if original is not None else spec["original"]
    if lengths is None and spec["multiples"] is not None and original is not None:
        lengths = tuple(int(m * original) for m in spec["multiples"])
    return original, lengths

