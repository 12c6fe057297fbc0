"""Runs with identical numbers: explained where it is by construction (p-RoPE and RoPE within
L), flagged as worth a look otherwise."""

from posenc.lab.claims.evidence import Runs
from posenc.lab.claims.identical import identical_runs_note

from tests.lab.helpers import results, run


def test_p_rope_beside_rope_is_explained_and_a_chance_pair_is_flagged():
    res = results()
    rope = next(r for r in res["runs"] if r["label"] == "rope")
    same = [rope["ppl"][k] for k in sorted(rope["ppl"], key=int)]
    res["runs"] += [run("p_rope", same), run("kerple", same)]
    notes = identical_runs_note(Runs(res), res["runs"])
    p_rope = next(n for n in notes if n.startswith("rope and p_rope"))
    assert "by construction: p_rope drops only RoPE's lowest frequencies" in p_rope
    chance = next(n for n in notes if n.startswith("rope and kerple"))
    assert chance.endswith("not expected by construction; worth a look.")
