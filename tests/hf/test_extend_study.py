"""The context-extension study on the study core, through its Python API on a tiny Llama:
a kill in the middle resumes to the results of an uninterrupted run, overwrite removes only
what the study wrote, an older results.json is recognised but not resumed, nothing is written
before every option is checked."""

from __future__ import annotations

import json

import pytest

from tests.hf.helpers import save_tiny_model, without

transformers = pytest.importorskip("transformers")

from posenc.errors import UserError  # noqa: E402
from posenc.hf import extend_study  # noqa: E402
from posenc.hf.extend_study import ExtendRequest, ExtendRuntime, ExtendStudy  # noqa: E402
from posenc.study import read_json, run_study  # noqa: E402

VOLATILE = {"seconds", "peak_rss_bytes", "rss_before_bytes"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


def _request(model_dir, **kw):
    base = dict(model=str(model_dir), data=str(model_dir.parent / "data.txt"),
                methods=("none", "yarn"), lengths=(128, 192), eval_windows=2, passkey=True,
                passkey_lengths=(256,), passkey_depths=(0.0,), passkey_trials=1)
    return ExtendRequest(**{**base, **kw})


def _run(model_dir, out, overwrite=False, **kw):
    study = ExtendStudy(_request(model_dir, **kw), ExtendRuntime())
    return run_study(study, out, overwrite=overwrite, progress=False)


def _stable(obj):
    return without(obj, VOLATILE)


def test_a_kill_mid_study_resumes_to_the_uninterrupted_results(model_dir, tmp_path,
                                                               monkeypatch):
    whole = _run(model_dir, tmp_path / "whole")
    real, lengths = extend_study.perplexity_vs_length, []

    def dies_on_the_third(model, tokens, lens, *args, **kwargs):
        lengths.extend(lens)
        if len(lengths) == 3:                       # yarn at 128: none's row is finished
            raise KeyboardInterrupt("killed")
        return real(model, tokens, lens, *args, **kwargs)

    monkeypatch.setattr(extend_study, "perplexity_vs_length", dies_on_the_third)
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        _run(model_dir, out)
    cut = read_json(out / "results.json")
    assert cut["kind"] == "extend" and cut["schema"] == 1
    assert list(cut["methods"]) == ["none"] and cut["partial"] == {}
    assert not (out / ".posenc.lock").exists()
    lengths.clear()
    resumed = _run(model_dir, out)
    assert lengths == [128, 192]                    # only yarn's points ran again
    assert [u.key[0] for u in resumed.ran] == ["ppl", "ppl", "passkey", "row"]
    assert _stable(read_json(out / "results.json")) == \
        _stable(read_json(whole.out_dir / "results.json"))
    none = read_json(out / "results.json")["methods"]["none"]
    assert none["ppl"][0] == cut["methods"]["none"]["ppl"][0]        # kept as written
    assert all(p["n_windows"] == 2 and p["ppl_std"] > 0 for p in none["ppl"])


def test_a_kill_inside_a_row_keeps_its_finished_points(model_dir, tmp_path, monkeypatch):
    def dies(*args, **kwargs):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(extend_study, "passkey_cell", dies)
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        _run(model_dir, out, methods=("none",))
    cut = read_json(out / "results.json")
    assert cut["methods"] == {} and sorted(cut["partial"]["none"]["ppl"]) == ["128", "192"]
    monkeypatch.undo()
    again = _run(model_dir, out, methods=("none",))
    assert [u.key[0] for u in again.ran] == ["passkey", "row"]


def test_overwrite_removes_only_what_the_study_wrote(model_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    old = {"model": "x", "native_context": 128, "n_tokens": 10,
           "config": {"lengths": [128]}, "methods": {"none": {"ppl": []}}}
    (out / "results.json").write_text(json.dumps(old))       # written by an older posenc
    for name in ("measurements.json", "passkey_none.png", "ppl.png"):
        (out / name).write_text("old")
    (out / "mine.txt").write_text("the user's")
    (out / "passkey_my_slide.png").write_text("the user's, not a method's")
    (out / "sub").mkdir()
    (out / "sub" / "ppl.png").write_text("the user's too")
    with pytest.raises(UserError, match="did not record its settings.*pass overwrite=True"):
        _run(model_dir, out, passkey=False)
    assert json.loads((out / "results.json").read_text()) == old
    with pytest.warns(UserWarning, match="left 3 file.*: mine.txt, passkey_my_slide.png, "
                      "sub/ppl.png"):                   # only exact names go, never a pattern
        _run(model_dir, out, passkey=False, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [
        ".posenc-outputs.json", "mine.txt", "passkey_my_slide.png", "ppl.png", "report.md",
        "results.json", "sub"]
    assert (out / "mine.txt").read_text() == "the user's"
    assert (out / "sub" / "ppl.png").read_text() == "the user's too"
    assert list(read_json(out / "results.json")["methods"]) == ["none", "yarn"]


def test_every_option_is_checked_before_anything_is_written(model_dir, tmp_path,
                                                            monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("measured before the options were checked")

    monkeypatch.setattr(extend_study, "perplexity_vs_length", measured)
    out = tmp_path / "run"
    for bad, message in [(dict(passkey_trials=0), "passkey trials must be"),
                         (dict(passkey_depths=()), "at least one passkey depth"),
                         (dict(eval_windows=0), "eval_windows must be an integer >= 1"),
                         (dict(lengths=(128, 100_000_000)), "needs about"),
                         (dict(passkey_lengths=(8,)), "shorter than the passkey prompt")]:
        with pytest.raises(UserError, match=message):
            _run(model_dir, out, **bad)
        assert not out.exists()


def test_lengths_inside_the_native_context_are_noted(model_dir, tmp_path):
    told = []
    study = ExtendStudy(_request(model_dir, methods=("none",), lengths=(64, 128),
                                 passkey=False, eval_windows=1), warn=told.append)
    run_study(study, tmp_path / "run", progress=False)
    assert len(told) == 2 and "no length exceeds the native context (128 tokens)" in told[0]
    assert "one window per length" in told[1]
    report = (tmp_path / "run" / "report.md").read_text()
    assert all(note in report for note in told)
    assert "**too few samples** at 64, 128: fewer than 5 windows" in report
    assert "windows per length: 64: 1, 128: 1" in report and "±" not in report.split(
        "## Perplexity")[1].split("## Memory")[0].replace("Perplexity ±", "")
