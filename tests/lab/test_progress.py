"""The comparison's progress bar: its total counts every training step of every seed and
each evaluation length of every evaluated run, and a full job fills it exactly."""

from __future__ import annotations

from posenc.lab.presets import preset
from posenc.lab.progress import CompareProgress


def test_a_full_job_fills_the_bar_exactly():
    cfg = preset("smoke", seeds=2)
    runs = 3                                              # (encoding, scaling) pairs evaluated
    bar = CompareProgress(cfg, runs, enabled=True)             # a disabled bar counts nothing
    for _ in range(cfg.seeds):
        for _ in cfg.encodings:
            bar.update(cfg.train.steps)                         # a run's training
        for _ in range(runs * len(cfg.eval_lengths)):
            bar.update(bar.eval_unit)                     # one evaluation length
    bar.stage("done")
    assert bar.bar.n == bar.bar.total > 0
    bar.close()
