"""The synthetic-task study: results.json, resuming and growing, verdicts that respect noise,
the report and the figure."""

from __future__ import annotations

import json
import math

import pytest

from posenc.lab import task_study
from posenc.lab.task_presets import TASK_PRESETS, TaskStudyConfig, task_preset
from posenc.lab.task_report import render_report, summarize
from posenc.lab.task_study import run_task_study
from posenc.lab.task_verdicts import (INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, decide,
                                      pair_verdict, ranking, score)

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = TaskStudyConfig(
    preset="test", encodings=("nope", "alibi"), seq2seq_encodings=("rope",), seeds=(0, 1),
    train_len=8, length_multipliers=(1, 2), d_model=16, n_layers=1, n_heads=2, steps=3,
    batch_size=4, seq2seq_len=3, seq2seq_min_len=2, seq2seq_steps=3, eval_examples=5)


def _pair(value) -> tuple[float, float]:
    """(exact match, token accuracy): a float stands for both."""
    return value if isinstance(value, tuple) else (value, value)


def fake_runs(monkeypatch, table: dict[tuple[str, int], dict[int, float]] | None = None):
    """Replace training by a lookup: exact match ``table[(encoding, seed)][length]``
    (default 0.5); returns the list of runs "trained"."""
    calls = []

    def run_one(cfg, part, task, encoding, seed, on_step=None):
        calls.append((part, task, encoding, seed))
        base = cfg.train_len if part == "lm" else cfg.seq2seq_len
        lengths = cfg.lm_lengths if part == "lm" else cfg.seq2seq_lengths
        values = (table or {}).get((encoding, seed), {})
        return {"part": part, "task": task, "encoding": encoding, "seed": seed,
                "options": {}, "train_len": base, "final_loss": 1.0, "curve": [[1, 1.0]],
                "params": 1, "seconds": {"train": 0.0, "eval": 0.0},
                "lengths": {str(n): {"exact_match": _pair(values.get(n, 0.5))[0],
                                     "token_accuracy": _pair(values.get(n, 0.5))[1],
                                     "n_examples": cfg.eval_examples, "note": None}
                            for n in lengths}}
    monkeypatch.setattr(task_study, "run_one", run_one)
    return calls


def test_a_real_tiny_study_writes_results_report_and_figure(tmp_path):
    results = run_task_study(tmp_path, TINY, progress=False)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["kind"] == "posenc task study" and on_disk["config"] == TINY.to_dict()
    keys = sorted((r["part"], r["task"], r["encoding"], r["seed"]) for r in on_disk["runs"])
    assert keys == sorted(task_study.planned_runs(TINY)) and len(keys) == 6
    for run in on_disk["runs"]:
        lengths = TINY.lm_lengths if run["part"] == "lm" else TINY.seq2seq_lengths
        assert sorted(map(int, run["lengths"])) == list(lengths)
        for cell in run["lengths"].values():
            assert 0.0 <= cell["exact_match"] <= cell["token_accuracy"] <= 1.0
            assert cell["n_examples"] == 5
        assert math.isfinite(run["final_loss"]) and run["curve"][-1][0] == 3
    cell = on_disk["summary"]["lm"]["copy"]["alibi"]["exact_match"]["16"]
    values = [r["lengths"]["16"]["exact_match"] for r in on_disk["runs"]
              if r["encoding"] == "alibi"]
    assert cell["values"] == values and cell["mean"] == pytest.approx(sum(values) / 2)
    report = (tmp_path / "report.md").read_text()
    assert "## Decoder-only models: copy" in report and "## Encoder-decoder models: reverse" \
        in report and "Kazemnejad et al. (2023)" in report
    assert "![accuracy against length](task_accuracy.png)" in report
    assert (tmp_path / "task_accuracy.png").stat().st_size > 10_000
    assert results["trained"] == [list(k) for k in task_study.planned_runs(TINY)]


def test_a_rerun_skips_finished_runs_and_more_seeds_train_only_the_new_ones(
        tmp_path, monkeypatch):
    calls = fake_runs(monkeypatch)
    run_task_study(tmp_path, TINY, progress=False)
    assert len(calls) == 6
    again = run_task_study(tmp_path, TINY, progress=False)
    assert len(calls) == 6 and again["trained"] == []
    grown = run_task_study(tmp_path, TINY, seeds=3, encodings=["nope", "t5"], progress=False)
    assert calls[6:] == [("lm", "copy", "nope", 2), ("lm", "copy", "t5", 0),
                         ("lm", "copy", "t5", 1), ("lm", "copy", "t5", 2),
                         *[("seq2seq", "reverse", e, s) for e in ("nope", "t5")
                           for s in (0, 1, 2)]]
    assert grown["config"]["encodings"] == ["nope", "alibi", "t5"]
    assert grown["config"]["seq2seq_encodings"] == ["rope", "nope", "t5"]
    assert grown["config"]["seeds"] == [0, 1, 2] and len(grown["runs"]) == 16
    fresh = run_task_study(tmp_path, TINY, progress=False, overwrite=True)
    assert len(calls) == 6 + 10 + 6 and len(fresh["runs"]) == 6
    assert json.loads((tmp_path / "results.json").read_text())["config"] == TINY.to_dict()


def test_another_setting_or_a_foreign_directory_is_refused(tmp_path, monkeypatch):
    fake_runs(monkeypatch)
    run_task_study(tmp_path / "a", TINY, progress=False)
    longer = TaskStudyConfig.from_dict({**TINY.to_dict(), "steps": 4, "lr": 1e-3})
    with pytest.raises(ValueError, match=r"another setting \(differs in lr, steps\)"):
        run_task_study(tmp_path / "a", longer, progress=False)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no task study"):
        run_task_study(tmp_path / "b", TINY, progress=False)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text('{"config": {}, "runs": []}')
    with pytest.raises(ValueError, match="not a posenc task study"):
        run_task_study(tmp_path / "c", TINY, progress=False)


def _results(tmp_path, monkeypatch, a: list[float], b: list[float], at_l: float = 0.9):
    """A study where nope (a) and rope (b) score the given exact match past L per seed."""
    cfg = TaskStudyConfig.from_dict({**TINY.to_dict(), "encodings": ["nope", "rope"],
                                     "seeds": list(range(len(a))), "seq2seq_task": None,
                                     "eval_examples": 1000})
    table = {}
    for enc, values in (("nope", a), ("rope", b)):
        for seed, v in enumerate(values):
            table[(enc, seed)] = {8: at_l, 16: v}
    fake_runs(monkeypatch, table)
    return run_task_study(tmp_path, cfg, progress=False)


def test_a_verdict_flips_to_inconclusive_when_the_spread_grows(tmp_path, monkeypatch):
    tight = _results(tmp_path / "tight", monkeypatch, [0.60, 0.62, 0.61], [0.30, 0.31, 0.29])
    assert pair_verdict(tight, "lm", "copy", "nope", "rope").verdict == SUPPORTED
    assert pair_verdict(tight, "lm", "copy", "rope", "nope").verdict == NOT_SUPPORTED
    # same means, seeds now scattered: the gap of 0.31 is within the summed spreads
    wide = _results(tmp_path / "wide", monkeypatch, [0.20, 0.62, 1.0], [0.0, 0.31, 0.59])
    v = pair_verdict(wide, "lm", "copy", "nope", "rope")
    assert v.verdict == INCONCLUSIVE
    assert "within the summed spreads (nope: seed std, rope: seed std)" in v.evidence
    assert "| copy: nope generalises better than rope | **inconclusive** |" \
        in render_report(wide)
    assert [r.tied for r in ranking(wide, "lm", "copy", ["nope", "rope"])] == [False, True]
    assert [r.tied for r in ranking(tight, "lm", "copy", ["rope", "nope"])] == [False, False]
    assert "- copy, exact match past L: nope > rope\n" in render_report(tight)
    assert "- copy, exact match past L: nope = rope\n" in render_report(wide)


def test_token_accuracy_still_separates_encodings_when_exact_match_is_zero(
        tmp_path, monkeypatch):
    res = _results(tmp_path, monkeypatch, [(0.0, 0.60), (0.0, 0.62)], [(0.0, 0.20), (0.0, 0.22)])
    assert pair_verdict(res, "lm", "copy", "nope", "rope").verdict == INCONCLUSIVE
    by_tokens = pair_verdict(res, "lm", "copy", "nope", "rope", metric="token_accuracy")
    assert by_tokens.verdict == SUPPORTED and "nope 0.61 ± 0.01" in by_tokens.evidence
    report = render_report(res)
    assert "| copy: nope generalises better than rope | **inconclusive** |" in report
    assert "| supported | past L: nope 0.61 ± 0.01 vs rope 0.21 ± 0.01 |" in report


def test_no_verdict_for_an_encoding_that_did_not_learn_the_task(tmp_path, monkeypatch):
    res = _results(tmp_path, monkeypatch, [0.6, 0.6], [0.0, 0.0], at_l=0.2)
    v = pair_verdict(res, "lm", "copy", "nope", "rope")
    assert v.verdict == INCONCLUSIVE and "did not learn the task at L" in v.evidence
    rows = ranking(res, "lm", "copy", ["nope", "rope"])
    assert all(r.note and r.note.startswith("did not learn") for r in rows)
    assert "past L: none; did not learn at L: nope, rope" in render_report(res)


def test_one_seed_uses_the_binomial_error_of_the_test_examples():
    one = score([0.5], n_examples=100)
    assert one.spread_kind == "eval s.e." and one.spread == pytest.approx(0.05)
    zero = score([0.0], 100).spread                    # (0 + 1) / 102 smoothed: not 0
    assert zero == pytest.approx(math.sqrt(1 / 102 * 101 / 102 / 100))
    several = score([0.2, 0.4], 100)
    assert several.spread_kind == "seed std" and several.spread == pytest.approx(0.1414, 1e-3)
    # seeds that agree by chance still carry the evaluation noise of their examples
    agree = score([0.10, 0.10, 0.10], 100)
    assert agree.spread_kind == "eval s.e." and agree.spread > 0.017
    assert decide(agree, score([0.07, 0.07, 0.07], 100)) == 0        # 0.03 < 0.017 + 0.015
    assert decide(agree, score([0.0, 0.0, 0.0], 100)) == 1
    # a precisely measured but tiny difference is a tie
    assert decide(score([0.01] * 3, 10_000), score([0.0] * 3, 10_000)) == 0
    assert decide(score([0.7], 100), score([0.5], 100)) == 1          # 0.2 > 0.046 + 0.05
    assert decide(score([0.55], 100), score([0.5], 100)) == 0
    assert decide(score([0.0, 0.0], 9), score([0.0, 0.0], 9)) == 0    # equal zeros: a tie


def test_the_figure_draws_the_means_and_spreads_of_the_summary(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from posenc.viz.task_plots import task_figure
    res = _results(tmp_path, monkeypatch, [0.6, 0.8], [0.0, 0.0])
    res["summary"] = summarize(res)
    fig = task_figure(res)
    ax, tokens = fig.axes                              # exact match above token accuracy
    assert "exact match" in ax.get_title() and "token accuracy" in tokens.get_title()
    lines = {c.get_label(): c.lines[0] for c in ax.containers}      # errorbar: data line
    assert set(lines) == {"nope", "rope"}
    assert list(lines["nope"].get_ydata()) == pytest.approx([0.9, 0.7])
    assert list(lines["rope"].get_ydata()) == pytest.approx([0.9, 0.0])
    xs = {k: list(v.get_xdata()) for k, v in lines.items()}
    assert xs["nope"] != xs["rope"]                    # equal values stay apart
    assert xs["nope"] == pytest.approx([8, 16], rel=0.05)
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["8", "16"]
    heights = {c.get_label(): [seg[1][1] - seg[0][1] for seg in c.lines[2][0].get_segments()]
               for c in ax.containers}                              # error bars: 2 x spread
    assert heights["nope"] == pytest.approx([0.0, 2 * 0.1414], abs=0.015)
    assert heights["rope"] == pytest.approx([0.0, 0.0], abs=0.015)   # eval s.e. only
    assert [t.get_text() for t in ax.texts] == ["all encodings equal at 8"]   # both 0.9
    res = _results(tmp_path / "zeros", monkeypatch, [0.0, 0.0], [0.0, 0.0])
    res["summary"] = summarize(res)
    fig2 = task_figure(res)
    assert [t.get_text() for t in fig2.axes[0].texts] == ["all encodings equal at 8, 16"]
    plt.close(fig2)
    plt.close(fig)


def test_presets_and_config_validation():
    assert set(TASK_PRESETS) == {"tasks", "tasks-smoke"}
    cfg = task_preset("tasks")
    assert cfg.lm_lengths[0] == cfg.train_len and cfg.lm_lengths[-1] == 8 * cfg.train_len
    assert len(cfg.seeds) >= 2
    with pytest.raises(ValueError, match="unknown task preset 'x'"):
        task_preset("x")
    with pytest.raises(ValueError, match="unknown encoding"):
        TaskStudyConfig(encodings=("nope", "bogus"))
    with pytest.raises(ValueError, match="length_multipliers must start at 1"):
        TaskStudyConfig(length_multipliers=(2, 4))
    with pytest.raises(ValueError, match="seeds must be distinct"):
        TaskStudyConfig(seeds=(1, 1))
    with pytest.raises(ValueError, match="valid: reverse, sort"):
        TaskStudyConfig(seq2seq_task="copy")
    with pytest.raises(ValueError, match="seeds must be a count >= 1"):
        task_study.resolve_config("tasks", 0, None)
