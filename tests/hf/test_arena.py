"""The extension arena on a tiny Llama saved to disk with a byte-level tokenizer: a 2 x 2 x 2
arena runs end to end (report with verdict lines, heat maps read back), a kill resumes to the
uninterrupted results, changed settings are refused, and the verdict rules on made-up
numbers."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tests.hf.helpers import save_tiny_model, without

transformers = pytest.importorskip("transformers")

from posenc.errors import UserError  # noqa: E402
from posenc.hf import arena  # noqa: E402
from posenc.hf.arena import ArenaRequest, ArenaRuntime, ArenaStudy  # noqa: E402
from posenc.hf.arena_report import counted_tasks, hit_estimate, verdicts  # noqa: E402
from posenc.study import read_json, run_study  # noqa: E402

VOLATILE = {"seconds", "peak_rss_bytes"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")
    docs = path.parent / "docs"
    docs.mkdir()
    for i, mod in enumerate(("json", "random", "textwrap")):
        source = Path(__import__(mod).__file__)
        (docs / f"{i}-{mod}.txt").write_text(source.read_text())
    return path


def _request(model_dir, **kw):
    base = dict(model=str(model_dir), text=str(model_dir.parent / "docs"),
                methods=("none", "yarn"), factor=2.0, original=256, lengths=(256, 512),
                depths=(0.0, 1.0), needles=2, passkey_trials=1, eval_windows=2)
    return ArenaRequest(**{**base, **kw})


def _run(model_dir, out, overwrite=False, **kw):
    study = ArenaStudy(_request(model_dir, **kw), ArenaRuntime())
    return run_study(study, out, overwrite=overwrite, progress=False)


def _stable(obj):
    return without(obj, VOLATILE)


@pytest.fixture(scope="module")
def whole(model_dir, tmp_path_factory):
    return _run(model_dir, tmp_path_factory.mktemp("arena") / "whole")


def test_a_two_by_two_by_two_arena_writes_results_report_and_heat_maps(whole):
    res = read_json(whole.out_dir / "results.json")
    assert res["kind"] == "arena" and res["schema"] == 1
    assert res["methods"] == ["none", "yarn"] and res["lengths"] == [256, 512]
    for task in ("needle", "passkey"):
        for method in ("none", "yarn"):
            cells = res[task][method]
            assert sorted(cells) == ["256:0", "256:1", "512:0", "512:1"]
            width = 2 if task == "needle" else 1
            assert all(len(h) == width and set(h) <= {0, 1} for h in cells.values())
    assert sorted(res["ppl"]["yarn"]) == ["256", "512"]
    assert all(p["n_windows"] == 2 for p in res["ppl"]["none"].values())
    assert res["extensions"]["yarn"]["method"] == "yarn"
    assert res["extensions"]["yarn"]["original_max_position_embeddings"] == 256
    report = (whole.out_dir / "report.md").read_text()
    assert "## Verdicts" in report and "![needle in a haystack](needle.png)" in report
    for label in ("needle in a haystack", "passkey retrieval", "perplexity"):
        assert f"| yarn beats no extension on {label} beyond 256 tokens |" in report
    assert "## What counts toward verdicts" in report
    assert {p.name for p in whole.paths} >= {"report.md", "needle.png", "passkey.png"}
    assert len(whole.ran) == 2 * 2 * (2 + 2 + 1)


def test_the_heat_map_draws_the_measured_accuracy(whole):
    import numpy as np

    from posenc.hf.arena_report import TASKS, accuracy_grid
    from posenc.viz.heatmaps import accuracy_heatmaps, panel_data
    res = read_json(whole.out_dir / "results.json")
    grids = {m: accuracy_grid(res, "needle", m) for m in res["methods"]}
    fig = accuracy_heatmaps(grids, res["lengths"], res["setting"]["depths"], TASKS["needle"],
                            res["original"])
    drawn = panel_data(fig)
    assert list(drawn) == ["none", "yarn"]
    for m in ("none", "yarn"):
        expect = [[sum(res["needle"][m][f"{n}:{i}"]) / 2 for n in (256, 512)]
                  for i in range(2)]
        assert np.allclose(drawn[m], expect)


def test_a_kill_mid_arena_resumes_to_the_uninterrupted_results(model_dir, whole, tmp_path,
                                                               monkeypatch):
    real, calls, killed = arena.needle_hits, [], []

    def dies_on_the_third(*args, **kwargs):
        calls.append(args[3])
        if len(calls) == 3 and not killed:
            killed.append(True)
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(arena, "needle_hits", dies_on_the_third)
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        _run(model_dir, out)
    cut = read_json(out / "results.json")
    assert sorted(cut["needle"]["none"]) == ["256:0", "256:1"]
    assert not (out / ".posenc.lock").exists()
    calls.clear()
    resumed = _run(model_dir, out)
    assert len(calls) == 6                              # the two needle cells done are kept
    assert len(resumed.ran) == len(whole.ran) - 5       # two needle, two passkey, one ppl
    assert _stable(read_json(out / "results.json")) == \
        _stable(read_json(whole.out_dir / "results.json"))


def test_changed_settings_are_refused_and_a_rerun_resumes(model_dir, whole, tmp_path):
    import shutil
    out = tmp_path / "copy"
    shutil.copytree(whole.out_dir, out)
    with pytest.raises(UserError, match=r"settings differ \(needles 2 there, 3 now\)"):
        _run(model_dir, out, needles=3)
    again = _run(model_dir, out)
    assert again.ran == ()


def test_bad_options_are_refused_before_anything_is_written(model_dir, tmp_path):
    for kw, match in ((dict(methods=("none", "warp")), "unknown method 'warp'"),
                      (dict(depths=(0.0, 1.5)), "depths must be"),
                      (dict(lengths=(64, 512)), "shorter than a prompt"),
                      (dict(needles=0), "needles must be"),
                      (dict(factor=1.0), "factor must be")):
        with pytest.raises(UserError, match=match):
            _run(model_dir, tmp_path / "bad", **kw)
        assert not (tmp_path / "bad").exists()


def _made_up(none_hits, yarn_hits, none_at_native=(1, 1, 1, 1, 1)):
    """Results of a 1-depth arena at 100 (original) and 200 tokens, a needle per hit given."""
    cells = lambda native, beyond: {"100:0": list(native), "200:0": list(beyond)}  # noqa: E731
    return {"original": 100, "lengths": [100, 200], "methods": ["none", "yarn"],
            "setting": {"depths": [0.5], "passkey_trials": 0, "windows": 0},
            "needle": {"none": cells(none_at_native, none_hits),
                       "yarn": cells((1, 1, 1, 1), yarn_hits)},
            "passkey": {}, "ppl": {}}


def test_verdicts_follow_the_noise_rule():
    by = lambda res: {v.claim.split(" on ")[1].split(" beyond")[0]: v  # noqa: E731
                      for v in verdicts(res)}
    clear = by(_made_up((0, 0, 0, 0, 0), (1, 1, 1, 1, 1)))["needle in a haystack"]
    assert clear.verdict == "supported" and "1.00 ± 0.16 (yarn) vs 0.00 ± 0.16" in clear.evidence
    worse = by(_made_up((1, 1, 1, 1, 1), (0, 0, 0, 0, 0)))["needle in a haystack"]
    assert worse.verdict == "not supported"
    close = by(_made_up((0, 1, 0, 1, 0), (1, 1, 0, 1, 1)))["needle in a haystack"]
    assert close.verdict == "inconclusive"
    few = by(_made_up((0, 0, 0, 0), (1, 1, 1, 1)))["needle in a haystack"]   # 4 needles
    assert few.verdict == "too few samples"
    assert few.evidence.startswith("too few samples: 4 needles over the cells (a verdict "
                                   "needs at least 5)")
    unsolved = _made_up((0, 0, 0, 0, 0), (1, 1, 1, 1, 1), none_at_native=(0, 0, 0, 0, 1))
    assert counted_tasks(unsolved)["needle"][0] is False
    assert by(unsolved)["needle in a haystack"].verdict == "not tested"
    assert by(unsolved)["passkey retrieval"].evidence == "does not count: not measured"


def test_a_one_window_arena_decides_no_verdict_and_says_why(model_dir, tmp_path):
    told = []
    study = ArenaStudy(_request(model_dir, eval_windows=1), ArenaRuntime(), warn=told.append)
    done = run_study(study, tmp_path / "one", progress=False)
    report = (done.out_dir / "report.md").read_text()
    rows = [line for line in report.split("## Verdicts")[1].splitlines()
            if line.startswith("| yarn beats")]
    assert len(rows) == 3
    assert not any("| supported |" in row or "| not supported |" in row for row in rows)
    ppl = next(row for row in rows if "on perplexity" in row)   # the tiny model's ppl counts
    assert "| too few samples |" in ppl
    assert "1 perplexity window per length (a verdict needs at least 5)" in ppl
    table = report.split("## Perplexity")[1].split("## ")[0].splitlines()
    assert "±" not in ppl and not any("±" in row for row in table if row.startswith("| yarn"))
    assert any("1 perplexity window(s) per length" in note for note in told)


def test_the_needle_spread_resamples_needles_and_never_claims_zero_noise():
    mean, spread = hit_estimate({"a": [1, 0, 1, 0], "b": [1, 1, 1, 1]}, ["a", "b"])
    assert mean == 0.75 and 0.162 <= spread < 0.3          # at least the binomial s.e.
    one = hit_estimate({"a": [1]}, ["a"])                  # one trial: the s.e. of 2/3
    assert one[0] == 1.0 and one[1] == pytest.approx(math.sqrt(2 / 9))
    perfect = hit_estimate({"a": [1, 1, 1, 1]}, ["a"])
    assert perfect[0] == 1.0 and perfect[1] > 0.15         # a perfect score still has noise
    assert hit_estimate({"a": [1]}, ["a", "b"]) is None
    assert math.isfinite(spread)
    json.dumps(spread)


def test_a_changed_text_is_refused_on_resume(model_dir, tmp_path):
    import shutil
    docs = tmp_path / "docs"
    shutil.copytree(model_dir.parent / "docs", docs)
    small = dict(text=str(docs), methods=("none",), depths=(0.5,), needles=1,
                 passkey_trials=0, eval_windows=0)
    first = _run(model_dir, tmp_path / "out", **small)
    assert len(first.ran) == 2 and "passkey.png" not in {p.name for p in first.paths}
    (docs / "0-json.txt").write_text((docs / "0-json.txt").read_text() + "\nmore text\n")
    with pytest.raises(UserError, match="whose text was .* now"):
        _run(model_dir, tmp_path / "out", **small)


def test_default_lengths_are_the_multiples_and_the_factor_of_the_original(model_dir, tmp_path):
    small = dict(methods=("none",), depths=(0.5,), needles=1, passkey_trials=0, eval_windows=0,
                 lengths=None, multiples=(1.0, 1.5))
    done = _run(model_dir, tmp_path / "out", **small)
    assert done.results["lengths"] == [256, 384, 512]          # 1x, 1.5x and factor 2x
    with pytest.raises(UserError, match="length multiples must be numbers > 0"):
        _run(model_dir, tmp_path / "bad", **{**small, "multiples": (0.0,)})


def test_every_method_cites_its_published_source():
    """A verdict names the paper of its method (authors and year), never posenc itself."""
    import re

    from posenc.methods import list_methods
    from posenc.methods import spec_citation as method_source
    assert method_source("none") == ""
    for method in list_methods():
        if method != "none":
            assert re.search(r"\b20\d\d\b", method_source(method)), method
            assert "posenc" not in method_source(method)
    assert method_source("yarn+logn") == method_source("yarn")


#: hand edits of an arena's results.json: (the edit, the field the refusal names)
EDITS = {
    "kind": (lambda d: d.update(kind="extend"), "methods must map methods to their results"),
    "needle_range": (lambda d: d["needle"]["none"].update({"256:0": [5, -1]}),
                     r"needle\['none'\]\['256:0'\] must be a list of 2 hits"),
    "needle_text": (lambda d: d["needle"]["none"].update({"256:0": "x"}),
                    r"needle\['none'\]\['256:0'\] must be a list of 2 hits"),
    "needle_short": (lambda d: d["needle"]["yarn"].update({"512:1": [1]}),
                     r"needle\['yarn'\]\['512:1'\] must be a list of 2 hits"),
    "windows": (lambda d: d["ppl"]["none"]["256"].update(window_nll=[]),
                r"ppl\['none'\]\['256'\].window_nll must be a non-empty list"),
    "ppl": (lambda d: d["ppl"]["yarn"]["512"].pop("ppl"),
            r"ppl\['yarn'\]\['512'\].ppl must be a number"),
}


def _edited(whole, tmp_path, name):
    import shutil
    out = tmp_path / name
    shutil.copytree(whole.out_dir, out)
    data = read_json(out / "results.json")
    EDITS[name][0](data)
    (out / "results.json").write_text(json.dumps(data))
    return out


@pytest.mark.parametrize("name", sorted(EDITS))
def test_plot_of_a_hand_edited_arena_is_one_line_naming_the_field(whole, tmp_path, capsys,
                                                                  name):
    from posenc.cli import main
    out = _edited(whole, tmp_path, name)
    code = main(["plot", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(out / "results.json") in err
    assert re.search(EDITS[name][1], err), err


@pytest.mark.parametrize("name", ["needle_range", "needle_text", "needle_short", "windows",
                                  "ppl"])
def test_a_rerun_measures_a_broken_cell_again(model_dir, whole, tmp_path, name):
    out = _edited(whole, tmp_path, name)
    again = _run(model_dir, out)
    assert len(again.ran) == 1
    assert _stable(read_json(out / "results.json")) == \
        _stable(read_json(whole.out_dir / "results.json"))
