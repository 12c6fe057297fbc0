"""Shape handicaps: ALiBi with fewer than 8 heads and RoPE-family runs with few frequencies
are named, and the report puts the note beside each quality verdict whose rule names them."""

from posenc.lab.claims.handicaps import handicaps_in, shape_handicaps
from posenc.lab.compare.presets import CompareConfig
from posenc.lab.report.report import render_report
from tests.lab.helpers import results


def config(heads, width, encodings=("rope", "alibi", "p_rope")):
    return CompareConfig(encodings=encodings).with_options(n_heads=heads, d_model=width,
                                                           n_layers=2).to_dict()


def test_alibi_with_few_heads_and_rope_with_few_frequencies_are_named():
    two = shape_handicaps(config(2, 64))
    assert set(two) == {"alibi"} and "1/16, 1/256" in two["alibi"]
    assert shape_handicaps(config(8, 256)) == {}                # 8 heads of width 32
    narrow = shape_handicaps(config(8, 64))                     # 4 frequency pairs a head
    assert set(narrow) == {"rope", "p_rope"} and "4 frequency pairs" in narrow["rope"]
    assert shape_handicaps(config(2, 64, ("rope",))) == {}      # no alibi run, no note


def test_handicaps_match_whole_run_names_in_rule_order():
    notes = {"rope": "r", "p_rope": "p", "alibi": "a"}
    assert handicaps_in("ratio of alibi < that of rope", notes) == ["alibi", "rope"]
    assert handicaps_in("p_rope ppl(L) < rope+yarn ppl(L)", notes) == ["p_rope", "rope"]
    assert handicaps_in("forget_gate ppl(L)", notes) == []


def test_the_report_names_the_handicap_beside_quality_verdicts_only():
    res = results()
    res["config"]["train"]["model"]["n_heads"] = 2
    report = render_report(res)
    rows = {line.split(" | ")[1]: line for line in report.splitlines()
            if line.startswith("| ") and " | " in line and line.split(" | ")[0][2:].isdigit()}
    assert "(handicap: alibi)" in rows["ALiBi extrapolates better than RoPE"]
    assert "handicap" not in rows["ALiBi and sinusoidal train fastest, RoPE and T5 slower"]
    assert "Handicap: ALiBi with 2 heads has slopes 1/16, 1/256" in report
