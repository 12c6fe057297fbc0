"""The progress bar of ``posenc compare``: one bar over training and evaluation."""

from __future__ import annotations

from .presets import CompareConfig


class CompareProgress:
    """One tqdm bar over the whole job; a training step counts 1, an evaluation length more.
    ``evaluated_runs``: the (encoding, scaling) runs evaluated per seed."""

    def __init__(self, cfg: CompareConfig, evaluated_runs: int, enabled: bool) -> None:
        from tqdm.auto import tqdm
        self.eval_unit = max(1, round(cfg.eval_tokens / (3 * cfg.train.tokens_per_step)))
        per_seed = len(cfg.encodings) * cfg.train.steps + evaluated_runs * len(
            cfg.eval_lengths) * self.eval_unit
        self.bar = tqdm(total=per_seed * cfg.seeds, disable=not enabled, desc="compare",
                        dynamic_ncols=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}"
                                   " {postfix}")

    def update(self, units: int) -> None:
        self.bar.update(units)

    def stage(self, text: str) -> None:
        self.bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        self.bar.close()
