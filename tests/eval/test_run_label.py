"""One function names a run ("rope", "rope+yarn:4"); the lab, its report and its figures use it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import posenc
from posenc.eval.inference_scaling import InferenceScaling, run_label
from posenc.lab.claims.evidence import Runs
from posenc.viz.plots import ratio_points

PACKAGE = Path(posenc.__file__).parent
#: a label assembled by hand: an f-string that starts with "+" or " + " before a field
HAND_MADE = re.compile(r"f[\"'] ?\+ ?\{")


@pytest.mark.parametrize("run, label, spaced", [
    ({"encoding": "rope"}, "rope", "rope"),
    ({"encoding": "alibi", "inference_scaling": None}, "alibi", "alibi"),
    ({"encoding": "rope", "inference_scaling": "yarn:4"}, "rope+yarn:4", "rope + yarn:4"),
    ({"encoding": "rope", "inference_scaling": InferenceScaling("ntk:4", True).label},
     "rope+ntk:4+logn", "rope + ntk:4+logn"),
])
def test_the_label_and_its_spaced_form(run, label, spaced):
    assert run_label(run) == label
    assert run_label(run, spaced=True) == spaced


def test_report_evidence_and_figures_name_runs_alike():
    runs = [{"encoding": "rope", "inference_scaling": None, "ppl": {"8": 5.0, "64": 9.0}},
            {"encoding": "rope", "inference_scaling": "yarn:8", "ppl": {"8": 5.0, "64": 6.0}}]
    results = {"config": {"train": {"train_len": 8}}, "corpus": {}, "runs": runs}
    assert set(Runs(results).by_label) == {"rope", "rope+yarn:8"}
    assert [p[0] for p in ratio_points(results)] == ["rope + yarn:8", "rope"]


def test_no_module_assembles_a_label_by_hand():
    hand_made = [f"{p.relative_to(PACKAGE)}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if HAND_MADE.search(line)]
    assert hand_made == []
