"""The task study's verdicts respect noise: seed spread or the binomial error of the test
examples, token accuracy where exact match is zero, no verdict for an encoding that did not
learn the task."""

from __future__ import annotations

import math

import pytest

from posenc.lab.tasks.report import render_report
from posenc.lab.tasks.verdicts import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    decide,
    pair_verdict,
    ranking,
    score,
)
from tests.lab.helpers import study_results as _results

pytestmark = pytest.mark.usefixtures("single_thread")


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


def test_cope_claims_join_selective_copy_only():
    """CoPE's pairs (Golovneva et al. 2024) are judged on selective copy, the papers'
    ordering everywhere; each verdict names its source."""
    from posenc.lab.tasks.verdicts import COPE_PAIRS, COPE_TASK, paper_verdicts

    def runs(task):
        rates = {"cope": 0.95, "rope": 0.05, "nope": 0.5}
        return [{"part": "lm", "task": task, "encoding": e, "seed": s, "train_len": 16,
                 "lengths": {"16": {"exact_match": 1.0, "token_accuracy": 1.0,
                                    "n_examples": 200},
                             "32": {"exact_match": r, "token_accuracy": r,
                                    "n_examples": 200}}}
                for e, r in rates.items() for s in (0, 1, 2)]
    for task in (COPE_TASK, "copy"):
        verdicts = paper_verdicts({"config": {"lm_tasks": [task]}, "runs": runs(task)})
        cope = [v for v in verdicts if v.claim.split(": ")[1].startswith("cope")]
        assert len(cope) == (len(COPE_PAIRS) if task == COPE_TASK else 0)
        assert all(v.verdict == "supported" and "Golovneva" in v.source for v in cope)
        assert any("Kazemnejad" in v.source for v in verdicts)


def test_path_against_rope_is_judged_on_the_flip_flop_language_only():
    """PaTH's state-tracking claim (Yang et al. 2025) is judged on flip-flop, not on copy;
    a lower PaTH rate past L is 'not supported', not silently dropped."""
    from posenc.lab.tasks.verdicts import paper_verdicts

    def runs(task, path_rate):
        rates = {"path": path_rate, "rope": 0.3}
        return [{"part": "lm", "task": task, "encoding": e, "seed": s, "train_len": 32,
                 "lengths": {"32": {"exact_match": 1.0, "token_accuracy": 1.0,
                                    "n_examples": 200},
                             "64": {"exact_match": r, "token_accuracy": r,
                                    "n_examples": 200}}}
                for e, r in rates.items() for s in (0, 1, 2)]

    def path_verdicts(task, rate):
        verdicts = paper_verdicts({"config": {"lm_tasks": [task]}, "runs": runs(task, rate)})
        return [v for v in verdicts if v.claim.split(": ")[1].startswith("path")]
    (better,) = path_verdicts("flip_flop", 0.9)
    assert better.verdict == "supported" and "Yang et al. (2025)" in better.source
    assert [v.verdict for v in path_verdicts("flip_flop", 0.05)] == ["not supported"]
    assert path_verdicts("copy", 0.9) == []
