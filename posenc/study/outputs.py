"""What a study wrote into its run directory: the list an overwrite removes, and nothing else.

``<dir>/.posenc-outputs.json`` lists, relative to the folder, every file the study wrote and
every folder it owns whole (a run folder ``runs/<encoding>/seed<k>``). A name is added, and
the list rewritten atomically, *before* the file or folder is written
(:func:`posenc.runio.announce_output`, which every writer of posenc calls), so after a crash
the list holds at least what is on disk. A user's file beside the study's outputs, whatever
its name (``runs/mynotes/seedlings.txt``, ``atlas/my_figure.png``), is never in the list.

Layout::

    {"format": "posenc-outputs", "version": 1, "outputs": ["report.md", "runs/rope/seed0"]}
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from ..errors import UserError
from ..runio import LOCK_FILE, OUTPUTS_FILE, atomic_write, is_temporary

FORMAT, VERSION = "posenc-outputs", 1


def safe_name(name: object) -> str | None:
    """``name`` as a relative POSIX path inside the folder, or None if it is not one
    (absolute, empty, with ``..``, or one of posenc's own bookkeeping files)."""
    if not isinstance(name, str) or not name or "\\" in name:
        return None
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or any(p in ("", ".", "..")
                                                             for p in parts):
        return None
    if parts[-1] in (LOCK_FILE, OUTPUTS_FILE):
        return None
    return PurePosixPath(*parts).as_posix()


class OutputList:
    """The outputs a study recorded in ``folder`` (module docstring). ``older``: the list
    was made from the names a study knows, for results written before lists were kept."""

    def __init__(self, folder: Path, names: Iterable[str] = (), older: bool = False) -> None:
        self.folder = folder
        self.names: set[str] = set(names)
        self.older = older

    @property
    def path(self) -> Path:
        return self.folder / OUTPUTS_FILE

    @classmethod
    def read(cls, folder: Path) -> OutputList | None:
        """The folder's list; None if it has none; a one-line UserError if it is damaged."""
        path = folder / OUTPUTS_FILE
        if not path.is_file():
            return None
        try:
            doc = json.loads(path.read_text())
            ok = doc.get("format") == FORMAT and isinstance(doc.get("outputs"), list)
        except (ValueError, AttributeError, UnicodeDecodeError):
            ok = False
        if not ok:
            raise UserError(f"{path} is damaged; posenc removes only what it listed there, "
                            "so remove the files yourself or choose another directory")
        return cls(folder, (n for n in map(safe_name, doc["outputs"]) if n is not None))

    @classmethod
    def adopt(cls, folder: Path, known: Iterable[str], older: bool = False) -> OutputList:
        """A list for a folder without one: the ``known`` exact names that exist there
        (``older``: the folder holds results written before lists were kept)."""
        names = [n for n in map(safe_name, known) if n is not None]
        found = cls(folder, (n for n in names if _exists(folder / n)), older=older)
        found.save()
        return found

    def covers(self, name: str) -> bool:
        """Whether ``name`` or a folder holding it is listed."""
        parts = PurePosixPath(name).parts
        return any(PurePosixPath(*parts[:i]).as_posix() in self.names
                   for i in range(1, len(parts) + 1))

    def note(self, path: Path) -> None:
        """Add ``path`` (absolute, about to be written) unless listed or not an output."""
        try:
            name = safe_name(path.relative_to(os.path.abspath(self.folder)).as_posix())
        except ValueError:
            return
        if name is None or any(is_temporary(p) for p in PurePosixPath(name).parts) \
                or self.covers(name):
            return
        self.names.add(name)
        self.save()

    def save(self) -> None:
        doc = {"format": FORMAT, "version": VERSION, "outputs": sorted(self.names)}
        atomic_write(self.path, (json.dumps(doc, indent=1) + "\n").encode())

    def remove(self) -> list[Path]:
        """Delete every listed file and folder (a link itself, never what it points to),
        then the folders this left empty, and empty the list. Returns what was deleted."""
        removed = []
        for name in sorted(self.names, reverse=True):
            path = self.folder / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif _exists(path):
                path.unlink()
            else:
                continue
            removed.append(path)
        for path in removed:                          # parents emptied by the removal
            for parent in path.parents:
                if parent == self.folder or not parent.is_relative_to(self.folder):
                    break
                if parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()
        self.names.clear()
        self.older = False
        self.save()
        return removed

    def left(self) -> list[str]:
        """The files (and empty folders) in the folder that are not posenc's bookkeeping."""
        out = []
        for path in sorted(self.folder.rglob("*")):
            rel = path.relative_to(self.folder)
            if rel.parts[-1] in (LOCK_FILE, OUTPUTS_FILE) or any(map(is_temporary, rel.parts)):
                continue
            if not path.is_dir() or not any(path.iterdir()):
                out.append(rel.as_posix())
        return out


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()
