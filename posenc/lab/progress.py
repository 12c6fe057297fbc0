"""The progress bar of ``posenc compare``: one bar over training and evaluation (plain
lines, one per stage and per 10 percent, when stderr is not a terminal)."""

from __future__ import annotations

from ..train.logging import progress_bar
from .presets import CompareConfig


class CompareProgress:
    """One tqdm bar over the whole job; a training step counts 1, an evaluation length more.
    ``evaluated_runs``: the (encoding, scaling) runs evaluated per seed."""

    def __init__(self, cfg: CompareConfig, evaluated_runs: int, enabled: bool,
                 file=None) -> None:
        self.eval_unit = max(1, round(cfg.eval_tokens / (3 * cfg.batch_size * cfg.train_len)))
        per_seed = len(cfg.encodings) * cfg.steps + evaluated_runs * len(
            cfg.eval_lengths) * self.eval_unit
        self.bar = progress_bar(per_seed * cfg.seeds, desc="compare", unit="units",
                                enabled=enabled, file=file,
                                bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                                           "{elapsed}<{remaining} {postfix}")

    def update(self, units: int) -> None:
        self.bar.update(units)

    def stage(self, text: str) -> None:
        self.bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        self.bar.close()
