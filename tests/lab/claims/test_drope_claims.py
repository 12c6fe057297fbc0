"""DroPE's claims from hand-made results: each follows its numbers, needs its runs, and cites
the paper with its numbers."""

from posenc.lab.claims.claims import check_claims
from posenc.lab.claims.drope_claims import DROPE_CLAIMS
from tests.lab.helpers import results, run

#: RoPE in results() goes 5.2 at L = 64 -> 22.0 at 1024
NEAR = [5.3, 5.3, 5.4, 5.5, 5.6]          # within 10 % of RoPE at L, flat past it
POOR = [7.0, 9.0, 20.0, 40.0, 80.0]       # 35 % worse at L, degrades fast
YARN = [5.2, 5.6, 7.0, 9.0, 12.0]


def verdicts(res):
    return {v.claim: v for v in check_claims(res)}


def with_runs(*extra):
    res = results()
    res["runs"] = res["runs"] + list(extra)
    return res


def test_not_tested_without_a_drope_run():
    v = verdicts(results())
    for name, *_ in DROPE_CLAIMS:
        assert v[name].verdict == "not tested" and "missing" in v[name].evidence


def test_the_claims_follow_the_numbers():
    keeps, beats = (c[0] for c in DROPE_CLAIMS)
    good = verdicts(with_runs(run("drope", NEAR), run("rope", YARN, "yarn:4")))
    bad = verdicts(with_runs(run("drope", POOR), run("rope", YARN, "yarn:4")))
    assert good[keeps].verdict == good[beats].verdict == "supported", good[beats].evidence
    assert bad[keeps].verdict == bad[beats].verdict == "not supported", bad[keeps].evidence
    assert "rope+yarn:4" in good[beats].evidence and "1.10 x rope" in bad[keeps].evidence


def test_without_yarn_the_second_claim_is_not_tested():
    res = with_runs(run("drope", NEAR))
    res["runs"] = [r for r in res["runs"]
                   if not (r.get("inference_scaling") or "").startswith("yarn")]
    v = verdicts(res)
    assert v[DROPE_CLAIMS[1][0]].verdict == "not tested", v[DROPE_CLAIMS[1][0]].evidence
    assert v[DROPE_CLAIMS[0][0]].verdict == "supported"


def test_the_sources_cite_the_paper_and_its_numbers():
    for _, source, rule, _ in DROPE_CLAIMS:
        assert "Gelberg" in source and "(2026)" in source and rule
    assert "28-42 %" in DROPE_CLAIMS[1][1] and "Fig. 1" in DROPE_CLAIMS[1][1]
