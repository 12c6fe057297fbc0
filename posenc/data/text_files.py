"""Documents from text files: a folder read recursively in name order (hidden entries left
out), each file's text when it is UTF-8 text (None for binary or another encoding). The named
texts (:mod:`posenc.data.texts`) and the essays (:mod:`posenc.data.essays`) read files so.
"""

from __future__ import annotations

from pathlib import Path


def read_folder(folder: Path) -> list[tuple[str, str | None]]:
    """(path relative to ``folder``, text or None) of every file under ``folder``, in name
    order; hidden files and folders are left out."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    return [(str(p.relative_to(folder)), read_text(p)) for p in files]


def read_text(path: Path) -> str | None:
    """The text of ``path``; None when it is not UTF-8 text (binary, another encoding)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else text
