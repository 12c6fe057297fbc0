"""RULER's families in the arena on a tiny Llama with a byte-level tokenizer: a run writes a
score per sample for every family, method and length, a table and verdict row per family and
ruler.png (read back); the verdict rules on made-up scores; bad RULER options are refused."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from tests.hf.helpers import save_tiny_model

transformers = pytest.importorskip("transformers")

from posenc.errors import UserError  # noqa: E402
from posenc.hf.arena import ArenaRequest, ArenaRuntime, ArenaStudy  # noqa: E402
from posenc.hf.arena_fields import check_arena_results  # noqa: E402
from posenc.hf.ruler import FAMILIES  # noqa: E402
from posenc.hf.ruler.report import counted_families, ruler_heatmaps, ruler_verdicts  # noqa: E402
from posenc.study import (  # noqa: E402
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    TOO_FEW,
    read_json,
    run_study,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")
    docs = path.parent / "docs"
    docs.mkdir()
    for i, mod in enumerate(("json", "random")):
        (docs / f"{i}-{mod}.txt").write_text(Path(__import__(mod).__file__).read_text())
    return path


def _request(model_dir, **kw):
    base = dict(model=str(model_dir), text=str(model_dir.parent / "docs"),
                methods=("none", "yarn"), factor=1.5, original=2048, lengths=(2048,),
                depths=(0.0,), needles=1, passkey_trials=0, eval_windows=0,
                tasks=tuple(FAMILIES), ruler_samples=1, ruler_lengths=(2048, 3072))
    return ArenaRequest(**{**base, **kw})


@pytest.fixture(scope="module")
def run(model_dir, tmp_path_factory):
    study = ArenaStudy(_request(model_dir), ArenaRuntime())
    return run_study(study, tmp_path_factory.mktemp("arena") / "ruler", progress=False)


def test_every_family_method_and_length_gets_a_score_per_sample(run):
    res = read_json(run.out_dir / "results.json")
    assert res["ruler_lengths"] == [2048, 3072]
    assert sorted(res["ruler"]) == sorted(FAMILIES)
    for family in FAMILIES:
        for method in ("none", "yarn"):
            cells = res["ruler"][family][method]
            assert sorted(cells) == ["2048", "3072"]
            assert all(len(v) == 1 and 0 <= v[0] <= 1 for v in cells.values())
    assert len(run.ran) == 2 * (1 + 2 * len(FAMILIES))
    check_arena_results(res, run.out_dir / "results.json")


def test_the_report_has_a_table_a_count_line_and_verdicts_per_family(run):
    report = (run.out_dir / "report.md").read_text()
    assert "## RULER" in report and "![RULER](ruler.png)" in report
    for family in FAMILIES.values():
        assert f"### {family.title}" in report
        assert f"- RULER {family.title}: " in report
        assert f"| yarn beats no extension on RULER {family.title} beyond 2048 tokens |" \
            in report
    assert "ruler.png" in {p.name for p in run.paths}


def test_ruler_png_draws_each_familys_scores_method_by_length(run):
    from posenc.viz.heatmaps import panel_data

    res = read_json(run.out_dir / "results.json")
    grids = panel_data(ruler_heatmaps(res))
    assert set(grids) == {f.title for f in FAMILIES.values()}
    for family, f in FAMILIES.items():
        want = [[res["ruler"][family][m][str(n)][0] for n in (2048, 3072)]
                for m in ("none", "yarn")]
        assert grids[f.title].tolist() == want


def _made_up(none, yarn, samples=3):
    """Results of one family measured at 1024 (original) and 2048, 4096."""
    res = {"setting": {"tasks": ["vt"], "ruler_samples": samples}, "original": 1024,
           "methods": ["none", "yarn"], "ruler_lengths": [1024, 2048, 4096],
           "model": "m", "ruler": {"vt": {}}}
    for method, scores in (("none", none), ("yarn", yarn)):
        res["ruler"]["vt"][method] = {str(n): s for n, s in zip((1024, 2048, 4096), scores)}
    return res


def test_ruler_verdicts_follow_the_noise_rule():
    ones, zeros = [1.0] * 3, [0.0] * 3
    better = _made_up([ones, zeros, zeros], [ones, ones, ones])
    assert [v.verdict for v in ruler_verdicts(better)] == [SUPPORTED]
    worse = _made_up([ones, ones, ones], [ones, zeros, zeros])
    assert [v.verdict for v in ruler_verdicts(worse)] == [NOT_SUPPORTED]
    mixed = _made_up([ones, [1.0, 0.0, 0.5], [0.5, 0.5, 1.0]],
                     [ones, [0.5, 1.0, 0.0], [1.0, 0.5, 0.5]])
    assert [v.verdict for v in ruler_verdicts(mixed)] == [INCONCLUSIVE]
    few = _made_up([[1.0], [0.0], [0.0]], [[1.0], [1.0], [1.0]], samples=1)
    assert [v.verdict for v in ruler_verdicts(few)] == [TOO_FEW]
    unsolved = copy.deepcopy(better)
    unsolved["ruler"]["vt"]["none"]["1024"] = [0.0, 0.25, 0.0]
    assert counted_families(unsolved)["vt"][0] is False
    verdict = ruler_verdicts(unsolved)[0]
    assert "does not count" in verdict.evidence and "0.08" in verdict.evidence
    assert "Hsieh et al. 2024" in verdict.source and not math.isnan(len(verdict.claim))


@pytest.mark.parametrize("kw,match", [
    ({"tasks": ("multikey", "qa")}, "unknown RULER task 'qa'"),
    ({"ruler_samples": 0}, "ruler_samples must be an integer >= 1"),
    ({"ruler_lengths": (4096, 4096)}, "4096 more than once"),
    ({"ruler_lengths": (8192,)}, "longer than the 3072 tokens"),
    ({"ruler_lengths": (300,)}, "needs more than"),
])
def test_bad_ruler_options_are_refused_before_anything_is_written(model_dir, tmp_path, kw,
                                                                   match):
    out = tmp_path / "out"
    with pytest.raises(UserError, match=match):
        run_study(ArenaStudy(_request(model_dir, **kw), ArenaRuntime()), out, progress=False)
    assert not out.exists() or not any(out.iterdir())


def test_without_ruler_tasks_the_setting_is_the_one_older_arenas_recorded(model_dir):
    setting = _request(model_dir, tasks=()).setting()
    assert not {"tasks", "ruler_samples", "ruler_lengths"} & set(setting)
    assert _request(model_dir).setting()["tasks"] == list(FAMILIES)


def test_the_gpu_preset_keeps_rulers_lengths_up_to_factor_times_the_original():
    from posenc.hf.arena_checks import ruler_lengths_of
    from posenc.hf.arena_request import preset_request

    kept, note = ruler_lengths_of(preset_request("gpu"), (8192, 16384, 24576, 32768), 8192)
    assert kept == (4096, 8192, 16384, 32768)
    assert note and "65536, 131072" in note[0]
    assert ruler_lengths_of(preset_request("cpu"), (512, 1024, 2048), 512) == \
        ((512, 1024, 2048), [])
    assert ruler_lengths_of(preset_request("cpu", tasks=()), (512,), 512) == ((), [])
