"""``posenc compare`` from the command line: ``--device`` / ``--dtype`` are recorded in the
comparison's settings, and a comparison grows whatever path names its data."""

import json

from posenc.cli import main

from tests.helpers import make_corpus

#: a comparison of one encoding in seconds
TINY = ["--preset", "smoke", "--scalings", "none", "--steps", "2", "--lengths", "16,32",
        "--eval-tokens", "64", "--no-atlas", "--no-progress"]


def cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_device_and_dtype_are_recorded_and_the_data_is_compared_by_content(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    corpus = make_corpus(tmp_path / "corpus")
    out = tmp_path / "out"
    code, _, err = cli(capsys, "compare", "--out", str(out), "--encodings", "nope",
                       "--data", str(corpus.resolve()), "--device", "cpu", "--dtype",
                       "float32", *TINY)
    assert code == 0, err
    train = json.loads((out / "results.json").read_text())["config"]["train"]
    assert (train["device"], train["bf16"]) == ("cpu", False)
    monkeypatch.chdir(tmp_path)                     # the same folder, by a relative path
    code, text, err = cli(capsys, "compare", "--out", str(out), "--encodings", "alibi",
                          "--data", "corpus", *TINY)
    assert code == 0, err
    assert "2 runs (1 trained now, 1 reused)" in text
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["encodings"] == ["nope", "alibi"]
    assert saved["config"]["train"]["data"] == str(corpus.resolve())
    code, _, err = cli(capsys, "compare", "--out", str(out), "--encodings", "alibi",
                       "--dtype", "bfloat16", "--data", "corpus", *TINY)
    assert code == 2 and "train.bf16 is False there but True now" in err
