"""An empty path is refused, never read as the current directory: every command's path
options (a one-line usage error, exit 2, nothing written) and the library functions that
take paths."""

from __future__ import annotations

import pytest

from posenc.cli import main
from posenc.data.cache import token_stream
from posenc.data.corpora import load_corpus
from posenc.errors import UserError
from posenc.train import train
from tests.train.helpers import tiny

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("argv", [
    ["train", "--out", ""],
    ["train", "--out", "run", "--data", ""],
    ["train", "--out", "run", "--cache-dir", ""],
    ["train", "--out", "run", "--cache-dir", "a\0b"],
    ["compare", "--out", ""],
    ["compare", "--out", "cmp", "--data", ""],
    ["atlas", "--out", ""],
    ["atlas", "--out", "atlas", "--run", ""],
    ["eval", ""],
    ["extend", "smollm2", "--out", ""],
    ["extend", "smollm2", "--data", ""],
    ["generate", "", "--prompt", "x"],
    ["plot", ""],
    ["tasks", "--out", ""],
    ["arena", "--out", ""],
], ids=lambda argv: " ".join(repr(a) for a in argv))
def test_empty_path_options_are_refused_before_anything_runs(argv, tmp_path, monkeypatch,
                                                              capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "empty path is not allowed" in err or "NUL" in err, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []                          # nothing written here


def test_library_refuses_empty_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("the user's own file\n" * 50)
    cfg = tiny(tmp_path / "cfg")
    for kwargs, run_dir, match in [({}, "", "run_dir is an empty path"),
                                   ({"data": ""}, "run", "data is an empty path"),
                                   ({"cache_dir": ""}, "run", "cache_dir is an empty path")]:
        bad = tiny(tmp_path / "cfg", **kwargs)
        with pytest.raises(UserError, match=match):
            train(bad, run_dir, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg", "notes.txt"]
    with pytest.raises(UserError, match="data path '' is empty"):
        load_corpus("")
    corpus = load_corpus(cfg.data)
    from posenc.data.tokenizer import build_tokenizer
    with pytest.raises(UserError, match="cache_dir is an empty path"):
        token_stream(corpus, build_tokenizer("byte", corpus, tmp_path / "cache"), "train", "")
