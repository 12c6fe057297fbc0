"""PaTH's claims (Yang et al., 2025) from hand-made results: each follows its numbers, needs
its runs, and cites the published source with a year."""

import re

from posenc.lab.claims.claims import check_claims
from posenc.lab.claims.path_claims import PATH_CLAIMS
from tests.lab.helpers import results, run

#: perplexity at 64 (L) .. 1024 of RoPE in results(): 5.2 -> 22.0
BEST = [5.0, 5.0, 5.0, 5.1, 5.1]          # below RoPE everywhere
BAD = [5.6, 9.0, 20.0, 40.0, 80.0]        # above RoPE everywhere
#: the forget gate between the two
MIDDLE = [5.3, 5.3, 5.4, 5.5, 5.6]


def verdicts(*extra):
    res = results()
    res["runs"] = res["runs"] + list(extra)
    return {v.claim: v for v in check_claims(res)}


def test_path_claims_are_not_tested_without_their_runs():
    v = verdicts()
    for name, *_ in PATH_CLAIMS:
        assert v[name].verdict == "not tested", name
        assert "missing" in v[name].evidence
    only_path = verdicts(run("path", BEST))
    assert only_path[PATH_CLAIMS[0][0]].verdict == "supported"
    assert only_path[PATH_CLAIMS[2][0]].verdict == "not tested"       # no path_fox run


def test_path_claims_follow_the_numbers():
    good = verdicts(run("path", BEST), run("path_fox", BEST), run("forget_gate", MIDDLE))
    bad = verdicts(run("path", BAD), run("path_fox", BAD), run("forget_gate", MIDDLE))
    for name, *_ in PATH_CLAIMS:
        assert good[name].verdict == "supported", (name, good[name].evidence)
        assert bad[name].verdict == "not supported", (name, bad[name].evidence)
    fox = good[PATH_CLAIMS[2][0]].evidence
    assert "at 64" in fox and "at 512" in fox and "forget_gate" in fox   # at L and at P
    assert "at 512" in good[PATH_CLAIMS[1][0]].evidence
    # in length better, past it worse: the two PaTH vs RoPE claims split
    split = verdicts(run("path", [5.0, 7.0, 12.0, 30.0, 60.0]))
    assert split[PATH_CLAIMS[0][0]].verdict == "supported"
    assert split[PATH_CLAIMS[1][0]].verdict == "not supported"


def test_path_claims_cite_the_published_source():
    for name, source, rule, _ in PATH_CLAIMS:
        assert re.search(r"\(2025\)", source) and "PaTH Attention" in source, name
        assert "Section" in source and rule
