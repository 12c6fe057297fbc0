"""report.md and index.html, from hand-made results.json dicts."""

import copy
import re

from posenc.lab.report.report import render_index, render_report
from tests.lab.helpers import results


def _rows(text, heading):
    part = text.split(heading)[1].split("\n## ")[0]
    return [line for line in part.splitlines()
            if line.startswith("| ") and "---" not in line][1:]


def test_report_has_tables_ranking_claims_and_paper_comparison():
    text = render_report(results(), ["ppl_vs_length.png"])
    for heading in ("## Did every model learn?", "## Perplexity against evaluation length",
                    "## Ranking", "## Published claims, checked on this run",
                    "## Compared with the ALiBi paper", "## Attention entropy against length",
                    "## Training and cost", "![ppl_vs_length](ppl_vs_length.png)",
                    "bootstrap over the evaluation text"):
        assert heading in text
    rows = _rows(text, "## Ranking")
    assert rows[0].startswith("| 1 | alibi") and rows[-1].split("|")[2].strip() == "learned"
    assert "n/a (past learned table of 64)" in text
    assert "6 of 6 pairs are ordered as in the paper" in text
    ppl_rows = _rows(text, "## Perplexity against evaluation length")
    assert ppl_rows[2].startswith("| rope | 5.200 ± ")


def test_ranking_marks_ties_within_noise():
    res = results()
    t5 = next(r for r in res["runs"] if r["label"] == "t5")
    alibi = next(r for r in res["runs"] if r["label"] == "alibi")
    for n in ("1024",):                                # t5 now equals alibi at 16L
        t5["ppl"][n] = alibi["ppl"][n]
        t5["seeds"][0]["ppl"][n] = alibi["seeds"][0]["ppl"][n]
        t5["seeds"][0]["window_nll"][n] = alibi["seeds"][0]["window_nll"][n]
    rows = _rows(render_report(res), "## Ranking")
    assert [r.split("|")[1].strip() for r in rows[:2]] == ["1=", "1="]
    assert {r.split("|")[2].strip() for r in rows[:2]} == {"alibi", "t5"}
    assert rows[2].split("|")[1].strip() == "3"


def test_partial_report_says_so():
    res = results()
    res["runs"] = res["runs"][:2]
    assert "Partial report: 2 of 10 runs finished" in render_report(res)


def test_index_links_report_figures_and_extra_pages():
    page = render_index(results(), ["ppl_vs_length.png"], links=(("Atlas", "atlas/index.html"),))
    assert '<a href="report.md">' in page and '<img src="ppl_vs_length.png"' in page
    assert '<a href="atlas/index.html">Atlas</a>' in page and "<figcaption>Perplexity" in page


def test_results_fixture_is_not_shared_state():
    a, b = results(), copy.deepcopy(results())
    a["runs"][0]["ppl"]["64"] = 1.0
    assert b["runs"][0]["ppl"]["64"] == 5.5


def test_index_links_registered_pages_that_exist(tmp_path, monkeypatch):
    import posenc.lab.report.report as report_mod
    monkeypatch.setattr(report_mod, "INDEX_LINKS", (("Atlas", "atlas/index.html"),
                                                    ("Other", "other.html")))
    (tmp_path / "atlas").mkdir()
    (tmp_path / "atlas/index.html").write_text("<html></html>")
    page = render_index(results(), [], report_mod.existing_links(tmp_path))
    assert '<a href="atlas/index.html">Atlas</a>' in page and "other.html" not in page


def test_a_stored_note_reads_back_as_its_reason():
    from posenc.encodings.limits import learned_table
    from posenc.eval.lengths import NotEvaluated
    from posenc.lab.report.report import behaviour
    note = NotEvaluated(learned_table(64, "learned")).note
    assert note == "n/a (past learned table of 64)"
    assert behaviour(None, note) == "cannot run (past learned table of 64)"
    refused = NotEvaluated(refusal="position 9 is outside the table (n_positions=9)").note
    assert behaviour(None, refused) == "cannot run (position 9 is outside the table " \
                                       "(n_positions=9))"


def test_one_seed_verdicts_are_provisional_and_print_their_paired_spread():
    text = render_report(results())
    claims = text.split("## Published claims")[1].split("\n## ")[0]
    assert "One seed: every decided verdict is provisional" in claims
    line = next(x for x in claims.splitlines() if x.startswith("8. "))
    assert line.endswith("(provisional: one seed).")
    numbers = claims.splitlines()[claims.splitlines().index(line) + 1]
    assert re.search(r"difference -?[\d.]+ vs paired spread [\d.]+", numbers)
    seeded = render_report(results(seeds=(0, 1, 2), spread=0.01))
    assert "provisional" not in seeded.split("## Published claims")[1].split("\n## ")[0]


def test_identical_learned_and_hierarchical_are_explained():
    from tests.lab.helpers import run
    res = results()
    res["runs"].append(run("hierarchical", [5.5, 6.6, 8.0, 10.0, 12.0]))
    section = render_report(res).split("## Did every model learn?")[1].split("\n## ")[0]
    assert "learned and hierarchical have identical numbers at L = 64" in section
    assert "by construction" in section and "u_j = alpha q_0" in section
    res["runs"][-1] = run("hierarchical", [5.7, 6.6, 8.0, 10.0, 12.0])
    assert "identical numbers" not in render_report(res)


def test_identical_up_to_float_rounding_is_identical():
    from tests.lab.helpers import run
    res = results()
    res["runs"].append(run("hierarchical", [5.5 * (1 + 1e-7), 6.6, 8.0, 10.0, 12.0]))
    assert "learned and hierarchical have identical numbers" in render_report(res)


def _users_three(res=None):
    """results() as a user's own text with three encodings: rope (+ linear:4), alibi, t5."""
    res = res or results()
    res["config"]["encodings"] = ["rope", "alibi", "t5"]
    res["config"]["scalings"] = ["linear:4"]
    res["config"]["train"]["data"] = "/home/me/notes.txt"
    res["corpus"] = {"name": "/home/me/notes.txt", "python_version": "3.11.7",
                     "sha256": "cd" * 32, "tokens": {"train": 90000, "validation": 5000,
                                                     "test": 5000}}
    res["runs"] = [r for r in res["runs"] if r["encoding"] in ("rope", "alibi", "t5")
                   and r["inference_scaling"] in (None, "linear:4")]
    return res


def test_claims_a_comparison_cannot_test_are_counted_in_one_line():
    text = render_report(_users_three())
    claims = text.split("## Published claims")[1].split("\n## ")[0]
    rows = [line for line in claims.splitlines() if re.match(r"\| \d+ \|", line)]
    assert not any("**not tested**" in row for row in rows)
    line = next(li for li in claims.splitlines() if li.startswith("**Not tested:**"))
    assert re.search(r"\d+ claims need encodings this comparison did not run: ", line)
    untested = int(re.search(r"(\d+) claims", line).group(1))
    from posenc.lab.claims.claims import CLAIMS
    from posenc.lab.claims.drope_claims import DROPE_CLAIMS
    from posenc.lab.claims.path_claims import PATH_CLAIMS
    from posenc.lab.claims.recent_claims import RECENT_CLAIMS
    every = len(CLAIMS) + len(RECENT_CLAIMS) + len(DROPE_CLAIMS) + len(PATH_CLAIMS)
    assert untested + len(rows) == every >= 26                       # every claim
    assert untested >= 10 and "learned and sinusoidal" in line


def test_the_header_names_the_users_data_and_only_settings_used():
    from posenc.lab.compare.presets import changed_from_preset
    res = _users_three()
    head = render_report(res, changed=changed_from_preset(res["config"])).split("## ")[0]
    assert "Data `/home/me/notes.txt` (100,000 tokens: train 90,000, validation 5,000, " \
           "test 5,000; sha256 cdcdcdcdcdcdcdcd...)" in head
    assert "Python" not in head and "Preset `default`" not in head
    assert "Encodings rope, alibi, t5;" in head and "changed: encodings" in head
    assert "Inference-time scalings: linear:4." in head
    stdlib = render_report(results()).split("## ")[0]
    assert "Corpus `stdlib`: the Python 3.11 standard library" in stdlib
    no_rope = results()
    no_rope["config"]["encodings"] = ["alibi", "t5"]
    assert "Inference-time scalings: none." in render_report(no_rope)


def test_a_comparison_computed_in_two_ways_says_so():
    res = results()
    res["execution"] = {"rope-s0": {"workers": 1, "threads": 2},
                        "nope-s0": {"workers": 1, "threads": 2}}
    assert "computed in different ways" not in render_report(res)
    res["execution"]["alibi-s0"] = {"workers": 2, "threads": 1}
    assert ("**Note:** the runs were computed in different ways (1 worker x 2 threads, 2 "
            "workers x 1 thread); floating-point sums split differently differ at about "
            "1e-7") in render_report(res)
