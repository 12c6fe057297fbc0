"""One run directory for every study: lock, comparable settings, typed results, overwrite.

A study writes into one folder (``posenc compare --out DIR``). :class:`RunDirectory` owns the
rules every study follows there:

- one writer: the folder's :class:`~posenc.runio.DirectoryLock` is taken before anything in it
  is read (when it exists) and held until the study ends;
- nothing is written until the study has checked all its input (:meth:`RunDirectory.open`
  only reads; :meth:`RunDirectory.claim` makes the folder its own);
- ``results.json`` carries the study's ``kind`` and the ``schema`` version of its layout, is
  rewritten atomically after every unit of work, and is read back with the study's own
  comparable-settings check: a second call resumes or grows the study, or is refused in one
  line naming what differs;
- overwrite removes only what the study recorded writing (:mod:`.outputs`: every file posenc
  writes into the folder while the study holds it is listed before it is written), and only
  in a folder whose results.json is the study's own: a folder posenc did not write is
  refused, never emptied. A folder written before the list was kept gets one made of the
  exact names the study knows (:meth:`StudyKind.known_outputs`, never a pattern), and an
  overwrite there warns which files it left.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..runio import (
    OUTPUTS_FILE,
    DirectoryLock,
    atomic_write,
    has_content,
    record_outputs,
    remove_stale_temporaries,
)
from .codec import dumps, read_json
from .names import API_NAMES
from .outputs import OutputList, safe_name

RESULTS = "results.json"


@dataclass(frozen=True)
class StudyKind:
    """What a study declares about the folder it writes.

    ``name`` is stamped into results.json as ``kind``; ``schema`` is the version of the
    results layout this code writes; ``command`` names the writer (the lock, messages).
    ``outputs``: exact names, relative to the folder, of the files every study of this kind
    may write, and ``named_outputs(results)`` those its results name (run folders, one
    figure per method): what an overwrite removes from a folder written before posenc
    listed its outputs (never a pattern). ``legacy``: recognises a results file
    written before kinds were stamped (schema 0). ``migrate(results, schema)``: the results
    of an older schema in the current layout (None: older schemas are refused).
    ``redraw(results, directory)``: the report and figures drawn again from the results
    alone (``posenc plot``), without rewriting results.json. ``record``: the file that marks
    a folder as this kind's and holds its settings (results.json for a study; a training
    run's config.json).
    """

    name: str
    schema: int
    command: str
    outputs: tuple[str, ...]
    legacy: Callable[[dict], bool] | None = None
    migrate: Callable[[dict, int], dict] | None = None
    description: str = ""
    redraw: Callable[[dict, RunDirectory], list[Path]] | None = None
    record: str = RESULTS
    named_outputs: Callable[[dict], Iterable[str]] | None = None

    def __post_init__(self) -> None:
        bad = [n for n in self.outputs if safe_name(n) != n or any(c in n for c in "*?[")]
        if bad:
            raise ValueError(f"outputs of {self.name} must be exact relative names: {bad}")

    def known_outputs(self, results: dict | None) -> list[str]:
        """Every exact name a study of this kind with ``results`` may have written."""
        named = self.named_outputs(results) if self.named_outputs and results else ()
        return [*self.outputs, *named]

    @property
    def what(self) -> str:
        return self.description or f"posenc {self.name} study"

    def recognises(self, data: Any) -> bool:
        """Whether ``data`` (a parsed results.json) was written by this kind of study."""
        if not isinstance(data, dict):
            return False
        if "kind" in data and "schema" in data:
            return data["kind"] == self.name
        return self.legacy is not None and self.legacy(data)


def read_study_results(folder: str | Path, kinds: tuple[StudyKind, ...]
                       ) -> tuple[StudyKind, dict]:
    """(the kind, its results in the current layout) of the study in ``folder``; a one-line
    UserError when the folder holds none of ``kinds``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} is not a directory")
    path = folder / RESULTS
    if not path.is_file():
        raise UserError(f"{folder} holds no {RESULTS}; give the output directory of "
                        + " or ".join(f"`{k.command}`" for k in kinds))
    data = read_json(path)
    for kind in kinds:
        if kind.recognises(data):
            return kind, _current(kind, data, path)
    raise UserError(f"{path} was not written by "
                    + " or ".join(f"`{k.command}`" for k in kinds))


def _current(kind: StudyKind, data: dict, path: Path) -> dict:
    """``data`` (recognised as ``kind``) in the current schema, or a one-line refusal."""
    schema = data.get("schema", 0) if "kind" in data else 0
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 0:
        raise UserError(f"{path} has an invalid schema version {schema!r}")
    if schema > kind.schema:
        raise UserError(f"{path} was written by a newer posenc (results schema {schema}, "
                        f"this one reads up to {kind.schema}); upgrade posenc")
    if schema < kind.schema:
        if kind.migrate is None:
            raise UserError(f"{path} has results schema {schema}, which this posenc no "
                            f"longer reads (it writes {kind.schema})")
        data = kind.migrate(data, schema)
    return data


class RunDirectory:
    """``with RunDirectory(out_dir, kind) as rd:`` the folder a study writes (module docstring).

    ``names`` maps "overwrite" and "out" to how the caller spells them in messages
    (:data:`~posenc.study.names.API_NAMES` or :data:`~posenc.study.names.CLI_NAMES`).
    """

    def __init__(self, path: str | Path, kind: StudyKind,
                 names: Mapping[str, str] = API_NAMES) -> None:
        if str(path) == "":
            raise UserError(f"{names['out']} must not be empty")
        self.path = Path(path)
        self.kind = kind
        self.names = dict(names)
        self.lock = DirectoryLock(self.path, kind.command)
        self._outputs: OutputList | None = None
        self._stop_recording: Callable[[], None] | None = None

    # ------------------------------------------------------------------ lock
    def __enter__(self) -> RunDirectory:
        if self.path.is_dir():
            self.lock.acquire()               # before looking: nobody changes it meanwhile
            self._record()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop_recording is not None:
            self._stop_recording()
            self._stop_recording = None
        self.lock.release()

    def _record(self) -> None:
        """From now on, list what posenc writes into the folder before it is written."""
        if self._stop_recording is None:
            self._stop_recording = record_outputs(self.path, self._note)

    def _note(self, path: Path) -> None:
        if path.name != OUTPUTS_FILE:             # the list itself is bookkeeping
            self.outputs().note(path)

    def outputs(self) -> OutputList:
        """What the study wrote here: the folder's list, or one made of the exact names the
        study knows that exist (a folder written before lists were kept; saved at once)."""
        if self._outputs is None:
            found = OutputList.read(self.path)
            if found is None:
                results = self.read()
                found = OutputList.adopt(self.path, self.kind.known_outputs(results),
                                         older=results is not None)
            self._outputs = found
        return self._outputs

    # ------------------------------------------------------------------ reading
    def read(self) -> dict | None:
        """The folder's results (its :attr:`StudyKind.record`) in the current schema; None if
        it holds none; a one-line UserError if it holds another study's or a file posenc did
        not write."""
        path = self.path / self.kind.record
        if not path.is_file():
            if path.exists():
                raise UserError(f"{path} is not a file; choose another {self.names['out']}")
            return None
        data = read_json(path)
        if not self.kind.recognises(data):
            other = data.get("kind") if isinstance(data, dict) else None
            held = (f"a posenc {other} study" if isinstance(other, str) and "schema" in data
                    else f"a {self.kind.record} that {self.kind.command} did not write")
            raise UserError(f"{self.path} holds {held}; choose another {self.names['out']} "
                            "(posenc never overwrites what it did not write)")
        return _current(self.kind, data, path)

    def open(self, incomparable: Callable[[dict], str | None],
             overwrite: bool = False) -> dict | None:
        """The results to resume or grow, or None for a new study. Reads only.

        Refuses (one line) a path that is a file, a non-empty folder without this study's
        results (with or without overwrite, unless posenc listed outputs there before: an
        overwrite then writes beside the files it did not write), and, unless ``overwrite``,
        results whose settings ``incomparable(results)`` says differ (the reason is quoted).
        """
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"{self.names['out']} {self.path} exists and is not a directory")
        existing = self.read()
        if existing is None:
            ours = overwrite and (self.path / OUTPUTS_FILE).is_file()
            if self.path.is_dir() and has_content(self.path) and not ours:
                raise UserError(f"{self.path} is not empty and holds no {self.kind.what} "
                                f"({self.kind.record}); choose a new or empty directory")
            return None
        if overwrite:
            return None
        reason = incomparable(existing)
        if reason:
            raise UserError(f"{self.path} holds a {self.kind.what} whose settings differ "
                            f"({reason}); pass {self.names['overwrite']} to replace it or "
                            f"choose another {self.names['out']}")
        return existing

    # ------------------------------------------------------------------ writing
    def claim(self, overwrite: bool = False) -> None:
        """Make the folder the study's: create and lock it if new, remove the temporaries a
        crash left, and with ``overwrite`` remove what the study wrote before. Call it only
        after every input is checked."""
        if not self.lock.held:                # a new folder: make it, lock it, look again
            self.path.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()
            if has_content(self.path):
                raise UserError(f"{self.path} was written by another process meanwhile")
        for folder in self._folders():
            remove_stale_temporaries(folder)
        self.outputs()                        # listed before anything more is written
        self._record()
        if overwrite:
            self.remove_outputs()

    def _folders(self) -> list[Path]:
        """The folder and the subfolders its outputs live in (where temporaries may stay)."""
        subs = {Path(p).parts[0] for p in self.kind.outputs if len(Path(p).parts) > 1}
        return [self.path] + [self.path / s for s in sorted(subs) if (self.path / s).is_dir()]

    def remove_outputs(self) -> list[Path]:
        """Delete what the study recorded writing (files and folders), then the folders
        that this left empty; nothing else. Returns what was deleted. In a folder written
        before outputs were listed, warns which files it left (not known by name)."""
        outputs = self.outputs()
        older = outputs.older
        # the exact names the kind declares are its own, listed or not (a writer that made
        # a folder whole, such as a checkpoint, may not have announced each file)
        outputs.names.update(n for n in self.kind.outputs if (self.path / n).exists())
        removed = outputs.remove()
        left = outputs.left() if older else []
        if left:
            shown = ", ".join(left[:8]) + (f" and {len(left) - 8} more" if len(left) > 8
                                           else "")
            warnings.warn(f"{self.path} was written by an older posenc that did not list its "
                          f"outputs: removed the {len(removed)} it knows by name and left "
                          f"{len(left)} file(s): {shown}", stacklevel=2)
        return removed

    def save(self, results: dict) -> Path:
        """results.json, stamped with the study's kind and schema, written atomically."""
        body = {k: v for k, v in results.items() if k not in ("kind", "schema")}
        doc = {"kind": self.kind.name, "schema": self.kind.schema, **body}
        path = self.path / RESULTS
        atomic_write(path, dumps(doc))
        return path

    def write(self, name: str, content: str | bytes) -> Path:
        """Write one output file (report.md, index.html, ...) atomically, listed among the
        study's outputs first (the atomic writer announces it); returns its path."""
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, content.encode("utf-8") if isinstance(content, str) else content)
        return path
