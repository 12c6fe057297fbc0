"""The lab's ratios beside the ALiBi paper's and Kazemnejad et al.'s orderings."""

from __future__ import annotations

import pytest

from posenc.lab.claims.evidence import Runs
from posenc.lab.claims.papers import PRESS_PPL, kazemnejad_rows, papers_section, press_ratio
from tests.lab.helpers import results


def test_the_paper_ratios_come_from_its_table():
    assert press_ratio("sinusoidal", 1) == pytest.approx(51.09 / 19.34)
    assert press_ratio("alibi", 2) == pytest.approx(18.01 / 18.66)
    assert set(PRESS_PPL) == {"sinusoidal", "rope", "t5", "alibi"}


def test_orderings_are_compared_per_corpus():
    bad = results()
    for run in bad["runs"]:
        if run["label"] == "alibi":                    # ALiBi now the worst at 8L
            run["ppl"]["512"] = 5000.0
    text = "\n".join(papers_section({"code": Runs(results()), "prose": Runs(bad)}))
    assert "- code at 512: ALiBi > T5 bias > rotary > sinusoidal: the paper's ordering" in text
    assert "- prose at 512: T5 bias > rotary > sinusoidal > ALiBi: not the paper's ordering" \
        in text
    header, rows = kazemnejad_rows({"code": Runs(results())})
    assert header == ["pair (paper: first is better)", "code"]
    t5_rope = next(r for r in rows if r[0] == "t5 vs rope")
    assert t5_rope[1].startswith("agrees")
    assert next(r for r in rows if r[0] == "nope vs rope")[1] == "not run"


def test_an_ordering_within_noise_says_so():
    import copy
    res = results()
    alibi = next(r for r in res["runs"] if r["label"] == "alibi")
    t5 = next(r for r in res["runs"] if r["label"] == "t5")
    t5["ppl"], t5["seeds"] = dict(alibi["ppl"]), copy.deepcopy(alibi["seeds"])  # equal ratios
    line = next(x for x in papers_section({"code": Runs(res)}) if x.startswith("- code at"))
    assert "(by the means; within noise: T5 bias and ALiBi)" in line
    assert "every step beyond noise" not in line
