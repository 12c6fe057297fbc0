"""A comparison's runs on other machines: each (encoding, seed) trained and evaluated in a
Ray task (:class:`posenc.study.ray_units.RayUnits`) that shares no folder with the driver.

The task gets the comparison's prepared data once per worker (through Ray's object store)
and the run's files the driver already holds (a run trained before is reused, a checkpoint
resumed), trains and evaluates in a temporary folder of its node, and returns the run's
files with what it measured; the driver writes them into ``runs/<encoding>/seed<k>``
before it commits the unit. The run is the same as a worker process makes
(:func:`~posenc.lab.compare.parallel_runs.train_and_evaluate`, one thread).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ...runio import LOCK_FILE, TMP_PREFIX, atomic_write
from .parallel_runs import GroupResult, train_and_evaluate
from .presets import CompareConfig

#: a run's files as they travel: path relative to the run folder -> content
RunFiles = dict[str, bytes]


def read_run_files(run_dir: Path) -> RunFiles:
    """Every file of a run folder (its lock and temporaries left out); {} if none."""
    if not run_dir.is_dir():
        return {}
    return {p.relative_to(run_dir).as_posix(): p.read_bytes()
            for p in sorted(run_dir.rglob("*")) if p.is_file()
            and p.name != LOCK_FILE and not p.name.startswith(TMP_PREFIX)}


def write_run_files(run_dir: Path, files: RunFiles) -> None:
    """Write ``files`` into ``run_dir``, each whole or not at all (a temporary renamed)."""
    for name, content in files.items():
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, content)


def run_group_shipped(cfg: CompareConfig, data: Any, files: RunFiles, encoding: str,
                      seed: int, scalings: list[str | None]) -> tuple[GroupResult, RunFiles]:
    """In a Ray task: train (or resume or reuse, from ``files``) and evaluate one run under
    ``scalings`` in a temporary folder; (what it measured, the run folder's files)."""
    import torch

    from .one_run import run_dir_of
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="posenc-run-") as tmp:
        run_dir = Path(tmp) / run_dir_of(encoding, seed)
        write_run_files(run_dir, files)
        result = train_and_evaluate(cfg, data, Path(tmp), encoding, seed, scalings)
        return result, read_run_files(run_dir)
