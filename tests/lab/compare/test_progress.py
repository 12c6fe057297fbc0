"""The comparison's progress: every unit of work weighs its training steps and each
evaluation length of its evaluated runs, and a full job's units add up to all of it."""

from __future__ import annotations

from posenc.lab.compare.presets import preset
from posenc.lab.compare.progress import UnitProgress, eval_unit
from posenc.lab.compare.study import CompareStudy, PreparedComparison


def test_the_units_weigh_every_step_and_evaluation_length():
    cfg = preset("smoke", seeds=2, timing_rounds=0)
    runs = 1 + len(cfg.scalings) + 1                 # rope, its scalings, alibi
    study = CompareStudy(cfg, "unused")
    study.prepared = PreparedComparison(cfg, data=None)     # plan reads the grown config only
    units = study.plan({"runs": [], "timing": None})
    assert [u.key for u in units] == [
        ("run", e, scaling, s) for s in (0, 1) for e in ("rope", "alibi")
        for scaling in ((None, *cfg.scalings) if e == "rope" else (None,))]
    total = cfg.seeds * (len(cfg.encodings) * cfg.train.steps
                         + runs * len(cfg.eval_lengths) * eval_unit(cfg))
    assert sum(u.weight for u in units) == total > 0
    moved = []
    UnitProgress(cfg, moved.append).update(3)
    assert moved == [3]
