"""Compare context-extension methods on one model: perplexity and passkey against length.

For each method the model is extended (:func:`posenc.hf.extend`), measured, optionally
fine-tuned at the extended length and measured again, and restored (weights too), so every
method starts from the same pretrained model. Every argument is checked before any forward.
Each finished row is handed to ``on_row`` as soon as it is measured (the CLI writes it to
disk), and rows given in ``done`` are reused instead of measured again (``--resume``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor, nn

from ..errors import UserError
from .extend import extend, make_extension, parse_method, restore
from .finetune import FinetuneConfig, finetune
from .measure import PeakMemory, PplPoint, check_memory, n_windows, perplexity_vs_length
from .passkey import min_length, passkey_grid

DEFAULT_METHODS = ("none", "linear", "ntk", "dynamic", "yarn")
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class StudyConfig:
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
        if len(set(self.methods)) != len(self.methods):
            raise UserError(f"methods repeat: {', '.join(self.methods)}")
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

    def factor_for(self, method: str) -> float | None:
        return None if parse_method(method)[0] == "none" else self.factor

    def options_for(self, method: str) -> dict[str, Any]:
        return dict(self.method_options) if parse_method(method)[0] != "none" else {}


def validate_study(model: nn.Module, config: StudyConfig, tokenizer: Any = None) -> None:
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


def work_units(config: StudyConfig, n_tokens: int) -> int:
    """Number of progress steps :func:`run_study` will report."""
    per = sum(n_windows(n_tokens, n, config.stride, config.max_windows) for n in config.lengths)
    if config.passkey:
        per += len(config.passkey_lengths) * len(config.passkey_depths) * config.passkey_trials
    total = per * len(config.methods)
    if config.finetune is not None:
        tuned = sum(parse_method(m)[0] != "none" for m in config.methods)
        total += tuned * (per + config.finetune.steps)
    return total


RowCallback = Callable[[str, dict[str, Any]], None]


def run_study(model: nn.Module, tokenizer: Any, tokens: Tensor, config: StudyConfig,
              progress: Callable[[int], None] | None = None,
              done: dict[str, Any] | None = None, partial: dict[str, Any] | None = None,
              on_row: RowCallback | None = None,
              on_partial: RowCallback | None = None) -> dict[str, Any]:
    """Measure every method; return a JSON-ready dict (see :mod:`posenc.hf.report`).

    Resuming: ``done`` maps row names (``yarn``, ``yarn+ft``) to rows measured before, kept as
    they are; ``partial`` maps a row name to the points and passkey cells of an unfinished
    row (``{"ppl": {length: point}, "passkey": {"i:j": accuracy}}``), which are not measured
    again. ``on_partial(name, partial)`` is called after each point or cell of a row and
    ``on_row(name, row)`` when the row is finished.
    """
    validate_study(model, config, tokenizer)
    done, partial = dict(done or {}), dict(partial or {})
    rows: dict[str, Any] = {}
    saved = None
    if config.finetune is not None:
        saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    per_row = work_units(config, int(tokens.numel())) // max(1, _n_rows(config))
    for method in config.methods:
        names = _row_names(model, config, method)
        if all(n in done for n in names):
            rows.update((n, done[n]) for n in names)
            if progress is not None:
                progress(per_row * len(names) + (config.finetune.steps if len(names) > 1
                                                 else 0))
            continue
        ext = extend(model, method, config.factor_for(method), config.original,
                     **config.options_for(method))
        try:
            if ext.name in done:
                rows[ext.name] = done[ext.name]
                if progress is not None:
                    progress(per_row)
            else:
                rows[ext.name] = _measure(model, tokenizer, tokens, config, progress,
                                          partial.get(ext.name), _bind(on_partial, ext.name),
                                          extension=ext.as_dict())
                if on_row is not None:
                    on_row(ext.name, rows[ext.name])
            if config.finetune is not None and ext.method != "none":
                losses = finetune(model, tokens, config.finetune, progress)
                rows[ext.name + "+ft"] = _measure(model, tokenizer, tokens, config, progress,
                                                  extension=ext.as_dict(),
                                                  finetune={**asdict(config.finetune),
                                                            "losses": losses})
                model.load_state_dict(saved)
                if on_row is not None:
                    on_row(ext.name + "+ft", rows[ext.name + "+ft"])
        finally:
            restore(model)
    return {"methods": rows, "config": config_dict(config), "n_tokens": int(tokens.numel())}


def _bind(callback: RowCallback | None, name: str) -> Callable[[dict], None] | None:
    return None if callback is None else (lambda state: callback(name, state))


def _row_names(model: nn.Module, config: StudyConfig, method: str) -> list[str]:
    ext = make_extension(model.config, method, config.factor_for(method), config.original,
                         **config.options_for(method))
    tuned = config.finetune is not None and ext.method != "none"
    return [ext.name] + ([ext.name + "+ft"] if tuned else [])


def _n_rows(config: StudyConfig) -> int:
    tuned = sum(parse_method(m)[0] != "none" for m in config.methods)
    return len(config.methods) + (tuned if config.finetune is not None else 0)


def _measure(model: nn.Module, tokenizer: Any, tokens: Tensor, config: StudyConfig,
             progress: Callable[[int], None] | None,
             partial: dict[str, Any] | None = None,
             on_partial: Callable[[dict], None] | None = None, **extra: Any) -> dict[str, Any]:
    """One row. The peak memory of a resumed row covers only what was measured this time."""
    state = {"ppl": dict((partial or {}).get("ppl", {})),
             "passkey": dict((partial or {}).get("passkey", {}))}

    def point(p: PplPoint) -> None:
        state["ppl"][str(p.length)] = asdict(p)
        if on_partial is not None:
            on_partial(state)

    def cell(key: str, accuracy: float) -> None:
        state["passkey"][key] = accuracy
        if on_partial is not None:
            on_partial(state)

    with PeakMemory() as mem:
        ppl = perplexity_vs_length(model, tokens, config.lengths, config.stride,
                                   config.max_windows, progress, config.memory_limit,
                                   {int(n): PplPoint(**p) for n, p in state["ppl"].items()},
                                   point)
        grid = None
        if config.passkey:
            grid = passkey_grid(model, tokenizer, config.passkey_lengths,
                                config.passkey_depths, config.passkey_trials, config.seed,
                                progress, config.memory_limit, state["passkey"], cell)
    return {**extra, "ppl": [asdict(p) for p in ppl],
            "passkey": None if grid is None else asdict(grid),
            "peak_rss_bytes": mem.peak, "rss_before_bytes": mem.start}


def config_dict(config: StudyConfig) -> dict[str, Any]:
    out = asdict(config)
    out["finetune"] = None if config.finetune is None else asdict(config.finetune)
    return out


def default_lengths(native: int) -> tuple[int, ...]:
    """1x, 1.5x and 2x the native context."""
    return (native, native * 3 // 2, native * 2)

