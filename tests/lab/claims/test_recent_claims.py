"""The claims of the papers since 2023 (hybrids, p-RoPE, the forget gate, stick-breaking,
Self-Extend, StreamingLLM) from hand-made results: each follows its numbers, needs its runs, and cites a
published source with a year."""

import re

from posenc.lab.claims.claims import check_claims
from posenc.lab.claims.recent_claims import RECENT_CLAIMS
from tests.lab.helpers import results, run

#: perplexity at 64 (L) .. 1024 of RoPE in results(): 5.2 -> 22.0
GOOD = [5.1, 5.1, 5.2, 5.3, 5.4]          # better than RoPE at L and stays near it
BAD = [5.6, 9.0, 20.0, 40.0, 80.0]        # worse at L and degrades faster
#: below ALiBi's 5.4 .. 5.25 of results() at every length
BEST = [5.0, 5.0, 5.0, 5.1, 5.1]


def verdicts(res):
    return {v.claim: v for v in check_claims(res)}


def with_runs(*extra):
    res = results()
    res["runs"] = res["runs"] + list(extra)
    return res


def claim(text):
    return next(c[0] for c in RECENT_CLAIMS if c[0].startswith(text))


def test_recent_claims_are_not_tested_without_their_runs():
    v = verdicts(results())
    for name, *_ in RECENT_CLAIMS:
        assert v[name].verdict == "not tested", name
        assert "missing" in v[name].evidence


def test_recent_claims_follow_the_numbers():
    good = with_runs(run("smollm3_plan", GOOD), run("llama4_plan", GOOD), run("p_rope", GOOD),
                     run("forget_gate", BEST), run("stick_breaking", BEST),
                     run("rope", GOOD, "self_extend:4"),
                     run("rope", [5.2, 5.2, 5.3, 5.4, 5.5], "streaming"))
    bad = with_runs(run("smollm3_plan", BAD), run("llama4_plan", BAD), run("p_rope", BAD),
                    run("forget_gate", BAD), run("stick_breaking", BAD),
                    run("rope", BAD, "self_extend:4"),
                    run("rope", BAD, "streaming"))
    v, w = verdicts(good), verdicts(bad)
    for name, *_ in RECENT_CLAIMS:
        assert v[name].verdict == "supported", (name, v[name].evidence)
        assert w[name].verdict == "not supported", (name, w[name].evidence)
    assert "llama4_plan" in w[claim("A RoPE/NoPE hybrid with windowed")].evidence
    assert "smollm3_plan" in w[claim("A RoPE/NoPE hybrid with full")].evidence
    gate = v[claim("The forget gate")].evidence
    assert "at 64" in gate and "at 512" in gate                       # at L and at P
    assert "stick_breaking ppl" in w[claim("Stick-breaking attention")].evidence


def test_recent_claims_cite_published_sources():
    for name, source, rule, _ in RECENT_CLAIMS:
        assert re.search(r"\(20\d\d\)", source), name
        assert "issue" not in source.lower() and rule
