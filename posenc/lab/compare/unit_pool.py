"""A study's units run in worker processes: the executor :func:`posenc.study.run_study`
drives when a study trains its runs side by side (:mod:`posenc.lab.compare.parallel_runs`).

The workers start when the driver asks the study for its executor (after ``plan``, never
inside it): every pooled unit is queued at once, and the driver then takes each unit's result
in plan order, commits it and saves the results, as it does for units run in process. Units
that share a task (a comparison's scalings of one trained run) are queued once; a unit with
no task runs in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...study import Study, Unit
from .parallel_runs import RunPool

#: (key, function, arguments) of the worker call a unit needs, or None: run it here
TaskOf = Callable[[Unit], tuple[Any, Callable[..., Any], tuple] | None]
#: the unit's result out of its task's (the unit, the task's result, first of its task)
Pick = Callable[[Unit, Any, bool], Any]


class PooledUnits:
    """``workers`` processes running the tasks of ``units`` (``task_of``); :meth:`run`
    waits for a unit's task and returns ``pick(unit, task_result, first)``."""

    def __init__(self, study: Study, units: Sequence[Unit], workers: int, task_of: TaskOf,
                 pick: Pick = lambda unit, result, first: result) -> None:
        self.study, self.task_of, self.pick = study, task_of, pick
        tasks: dict[Any, tuple[Callable[..., Any], tuple]] = {}
        for unit in units:
            task = task_of(unit)
            if task is not None and task[0] not in tasks:
                tasks[task[0]] = task[1:]
        self.pool = RunPool(min(workers, len(tasks))) if tasks else None
        for key, (fn, args) in tasks.items():
            self.pool.submit_call(key, fn, *args)
        self.taken: set[Any] = set()

    def run(self, unit: Unit, advance: Callable[[int], None]) -> Any:
        task = self.task_of(unit)
        if task is None or self.pool is None:
            return self.study.run_unit(unit, advance)
        key = task[0]
        first = key not in self.taken
        self.taken.add(key)
        return self.pick(unit, self.pool.result(key), first)

    def close(self, abort: bool = False) -> None:
        """Stop the workers (queued tasks not started are dropped; with ``abort`` running
        ones too)."""
        if self.pool is not None:
            self.pool.close(abort)
            self.pool = None

