"""The shape every study has: a plan of units of work, one unit at a time, a report.

A :class:`Study` (``compare``, ``tasks``, ``extend``) says what it writes (its
:class:`~posenc.study.rundir.StudyKind`), checks its input and loads its data once
(``prepare``), lists the units of work still to do (``plan``), runs one unit into the results
(``run_unit``) and renders its report and figures from the results (``render``).
:func:`run_study` is the one loop around them: the run directory's lock and checks, nothing
written before ``prepare`` succeeds, results saved after every unit (a crash loses at most
the unit in progress; the next call resumes), the progress bar, the final report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .progress import StudyProgress
from .rundir import API_NAMES, RunDirectory, StudyKind


@dataclass(frozen=True)
class Unit:
    """One unit of work: ``key`` identifies it in the results, ``label`` is shown while it
    runs, ``weight`` is its share of the progress bar (e.g. training steps)."""

    key: tuple
    label: str
    weight: int = 1


class Study(Protocol):
    """What a study implements; :func:`run_study` calls these in order."""

    kind: StudyKind

    def incomparable(self, existing: dict) -> str | None:
        """Why the results already in the folder cannot be grown by this study (None: they
        can)."""

    def prepare(self, existing: dict | None) -> dict:
        """Check every input and load the data (once); return the results to start from
        (``existing`` grown to this study's settings, or new ones). Writes nothing."""

    def plan(self, results: dict) -> list[Unit]:
        """The units still to run, in order (those done in ``results`` left out)."""

    def run_unit(self, unit: Unit, results: dict, advance: Callable[[int], None]) -> None:
        """Run ``unit`` and put what it measured into ``results``; ``advance(n)`` reports
        progress inside the unit (at most ``unit.weight`` in all)."""

    def render(self, results: dict, directory: RunDirectory, final: bool) -> list[Path]:
        """Write the report (and, when ``final``, the figures) from ``results``."""

    # optional: ``close(abort: bool = False)``, called once the study ends (``abort``: it was
    # interrupted or failed), e.g. to stop worker processes that :meth:`plan` started


@dataclass(frozen=True)
class StudyOutcome:
    """What a study wrote and which units it ran now."""

    out_dir: Path
    results: dict
    paths: tuple[Path, ...]
    ran: tuple[Unit, ...]


def run_study(study: Study, out_dir: str | Path, *, overwrite: bool = False,
              progress: bool = True, names: Mapping[str, str] = API_NAMES) -> StudyOutcome:
    """Run, resume or grow ``study`` in ``out_dir`` (module docstring). ``overwrite`` starts
    over, removing only what the study wrote; ``names``: how messages name the caller's
    options (the CLI passes its flags). A study's ``close`` (if it has one) is called at the
    end, with ``abort=True`` when the study was interrupted or failed."""
    close = getattr(study, "close", None)
    try:
        outcome = _run(study, out_dir, overwrite, progress, names)
    except BaseException:
        if close is not None:
            close(abort=True)
        raise
    if close is not None:
        close()
    return outcome


def _run(study: Study, out_dir: str | Path, overwrite: bool, progress: bool,
         names: Mapping[str, str]) -> StudyOutcome:
    with RunDirectory(out_dir, study.kind, names) as directory:
        existing = directory.open(study.incomparable, overwrite)
        results = study.prepare(existing)
        directory.claim(overwrite)
        directory.save(results)
        units = study.plan(results)
        bar = StudyProgress(sum(u.weight for u in units), study.kind.name, progress)
        ran = []
        try:
            for unit in units:
                bar.stage(unit.label)
                before = bar.done
                study.run_unit(unit, results, bar.advance)
                bar.advance(unit.weight - (bar.done - before))
                directory.save(results)
                study.render(results, directory, final=False)
                ran.append(unit)
                bar.unit_done(unit.label)
            bar.stage("writing the report")
            directory.save(results)
            paths = study.render(results, directory, final=True)
        finally:
            bar.close()
    return StudyOutcome(directory.path, results, tuple(paths), tuple(ran))
