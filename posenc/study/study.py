"""The shape every study has: a plan of units of work, one unit at a time, a report.

A :class:`Study` (``compare``, ``tasks``, ``extend``, ``arena``) says what it writes (its
:class:`~posenc.study.rundir.StudyKind`), checks its input and loads its data once
(``prepare``), lists the units of work still to do (``plan``, which starts nothing), runs one
unit and returns what it measured as a plain picklable value (``run_unit``), puts that value
into the results (``commit``) and renders its report and figures from the results alone
(``render``). :func:`run_study` is the one driver around them: the run directory's lock and
checks, nothing written before ``prepare`` succeeds, the units run by the study's
:class:`UnitExecutor` (in this process, in order, unless the study runs them in worker
processes), each result committed by the driver and the results saved after every unit (a
crash loses at most the unit in progress; the next call resumes), the progress bar, the
final report. Because a unit's result travels as a value, an executor that runs units
elsewhere (one unit per remote task) needs no change to the studies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .names import API_NAMES
from .placement import record_placement
from .progress import StudyProgress
from .rundir import RunDirectory, StudyKind

Advance = Callable[[int], None]


@dataclass(frozen=True)
class Unit:
    """One unit of work: ``key`` identifies it in the results, ``label`` is shown while it
    runs, ``weight`` is its share of the progress bar (e.g. training steps)."""

    key: tuple
    label: str
    weight: int = 1


class UnitExecutor(Protocol):
    """Runs a study's units; :func:`run_study` asks for their results in plan order."""

    def run(self, unit: Unit, advance: Advance) -> Any:
        """The result of ``unit`` (waiting for it where it runs elsewhere)."""

    def close(self, abort: bool = False) -> None:
        """Stop whatever it started (``abort``: the study was interrupted or failed)."""


@runtime_checkable
class Watched(Protocol):
    """An executor whose units finish out of plan order (elsewhere, side by side) and that
    says so: :func:`run_study` calls ``watch(finished)`` once, and the executor calls
    ``finished(unit)`` when ``unit`` ends before its turn, so the progress bar counts it
    when it finishes, not when the driver commits it."""

    def watch(self, finished: Callable[[Unit], None]) -> None:
        """Call ``finished(unit)`` for each unit that ends before the driver asks for it."""


class InOrder:
    """The default executor: each unit run by ``study.run_unit`` in this process, in order."""

    def __init__(self, study: Study) -> None:
        self.study = study

    def run(self, unit: Unit, advance: Advance) -> Any:
        return self.study.run_unit(unit, advance)

    def close(self, abort: bool = False) -> None:
        pass


class Study(Protocol):
    """What a study implements; :func:`run_study` calls these in order. A study class
    subclasses it to inherit the defaults (:meth:`executor`, :meth:`close`,
    :attr:`render_every`)."""

    kind: StudyKind
    #: a report redrawn after a unit at most this often (seconds; the last is always drawn)
    render_every: float = 0.0

    def check_existing(self, existing: dict, path: Path) -> None:
        """Before :meth:`incomparable`: refuse, in one line naming ``path`` and the field,
        results this study cannot read (a hand edit, a damaged file), and delete from them
        the units whose values are broken, so that :meth:`plan` runs them again."""

    def incomparable(self, existing: dict) -> str | None:
        """Why the results already in the folder cannot be grown by this study (None: they
        can)."""

    def prepare(self, existing: dict | None) -> dict:
        """Check every input and load the data (once); return the results to start from
        (``existing`` grown to this study's settings, or new ones). Writes nothing."""

    def plan(self, results: dict) -> list[Unit]:
        """The units still to run, in order (those done in ``results`` left out). Starts
        nothing."""

    def run_unit(self, unit: Unit, advance: Advance) -> Any:
        """Run ``unit`` and return what it measured (a plain picklable value); ``advance(n)``
        reports progress inside the unit (at most ``unit.weight`` in all)."""

    def commit(self, results: dict, unit: Unit, result: Any) -> None:
        """Put ``result`` (what :meth:`run_unit` returned for ``unit``) into ``results``."""

    def render(self, results: dict, directory: RunDirectory, final: bool) -> list[Path]:
        """Write the report (and, when ``final``, the figures) from ``results`` alone."""

    def executor(self, units: Sequence[Unit]) -> UnitExecutor:
        """How ``units`` run: by default here, one after the other (:class:`InOrder`)."""
        return InOrder(self)

    def close(self, abort: bool = False) -> None:
        """Called once when the study ends (``abort``: it was interrupted or failed)."""


@dataclass(frozen=True)
class StudyOutcome:
    """What a study wrote, which units it ran now and what each returned."""

    out_dir: Path
    results: dict
    paths: tuple[Path, ...]
    ran: tuple[Unit, ...]
    returned: tuple[Any, ...] = ()


def run_study(study: Study, out_dir: str | Path, *, overwrite: bool = False,
              progress: bool = True, names: Mapping[str, str] = API_NAMES) -> StudyOutcome:
    """Run, resume or grow ``study`` in ``out_dir`` (module docstring). ``overwrite`` starts
    over, removing only what the study wrote; ``names``: how messages name the caller's
    options (the CLI passes :data:`~posenc.study.names.CLI_NAMES`). The study's ``close`` is
    called at the end, with ``abort=True`` when it was interrupted or failed."""
    try:
        outcome = _run(study, out_dir, overwrite, progress, names)
    except BaseException:
        study.close(abort=True)
        raise
    study.close()
    return outcome


def _run(study: Study, out_dir: str | Path, overwrite: bool, progress: bool,
         names: Mapping[str, str]) -> StudyOutcome:
    with RunDirectory(out_dir, study.kind, names) as directory:
        record = directory.path / study.kind.record

        def incomparable(existing: dict) -> str | None:
            study.check_existing(existing, record)
            return study.incomparable(existing)
        existing = directory.open(incomparable, overwrite)
        results = study.prepare(existing)
        directory.claim(overwrite)
        directory.save(results)
        units = study.plan(results)
        bar = StudyProgress(sum(u.weight for u in units), study.kind.name, progress)
        ran, returned, rendered_at = [], [], None
        counted: dict[tuple, int] = {}            # each unit's work on the bar so far

        def count(unit: Unit, n: int) -> None:
            n = max(0, min(int(n), unit.weight - counted.get(unit.key, 0)))
            counted[unit.key] = counted.get(unit.key, 0) + n
            bar.advance(n)

        def finished(unit: Unit) -> None:
            count(unit, unit.weight)
        executor = study.executor(units) if units else InOrder(study)
        if isinstance(executor, Watched):
            executor.watch(finished)
        try:
            for unit in units:
                bar.stage(unit.label)
                result = executor.run(unit, lambda n, unit=unit: count(unit, n))
                finished(unit)
                study.commit(results, unit, result)
                where = getattr(executor, "placement", None)
                if where is not None and where(unit) is not None:
                    record_placement(results, unit, where(unit))
                directory.save(results)
                now = time.monotonic()
                if rendered_at is None or now - rendered_at >= study.render_every:
                    study.render(results, directory, final=False)
                    rendered_at = now
                ran.append(unit)
                returned.append(result)
                bar.unit_done(unit.label)
            bar.stage("writing the report")
            directory.save(results)
            paths = study.render(results, directory, final=True)
        except BaseException:
            executor.close(abort=True)
            raise
        else:
            executor.close()
        finally:
            bar.close()
    return StudyOutcome(directory.path, results, tuple(paths), tuple(ran), tuple(returned))
