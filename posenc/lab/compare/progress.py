"""Progress of ``posenc compare`` in the study core's units: a training step counts 1, an
evaluation length more (about what scoring that many tokens costs)."""

from __future__ import annotations

from collections.abc import Callable

from .presets import CompareConfig


def eval_unit(cfg: CompareConfig) -> int:
    """What one evaluation length counts, in training steps (at least 1)."""
    return max(1, round(cfg.eval_tokens / (3 * cfg.train.tokens_per_step)))


def unit_weight(cfg: CompareConfig, evaluations: int, trains: bool = True) -> int:
    """The weight of one (encoding, seed) unit: its training steps (if it ``trains``) and
    ``evaluations`` evaluated runs at every length."""
    return (cfg.train.steps if trains else 0) + evaluations * len(cfg.eval_lengths) * \
        eval_unit(cfg)


class UnitProgress:
    """Progress inside one unit: ``update(n)`` moves ``n`` units of its weight;
    ``eval_unit`` is what one evaluation length counts."""

    def __init__(self, cfg: CompareConfig, advance: Callable[[int], None]) -> None:
        self.eval_unit = eval_unit(cfg)
        self.advance = advance

    def update(self, units: int) -> None:
        self.advance(units)
