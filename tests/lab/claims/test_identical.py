"""Runs with identical numbers: explained where it is by construction (p-RoPE and RoPE within
L; M-RoPE and RoPE on text, as the encoding declares and the README says), flagged as worth
a look otherwise."""

import re
from pathlib import Path

from posenc.encodings.registry import encoding_class, list_encodings
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


def test_m_rope_beside_rope_is_explained_by_what_the_encoding_declares():
    res = results()
    rope = next(r for r in res["runs"] if r["label"] == "rope")
    res["runs"] += [run("mrope", [rope["ppl"][k] for k in sorted(rope["ppl"], key=int)])]
    note = next(n for n in identical_runs_note(Runs(res), res["runs"])
                if n.startswith("rope and mrope"))
    assert note.endswith(f"by construction: {encoding_class('mrope').equals_on_text_because}.")
    assert "worth a look" not in note


def test_the_readme_states_exactly_the_declared_equalities_on_text():
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    stated = set(re.findall(r"`(\w+)`(?: \([^)]*\))? is `(\w+)` exactly", readme))
    declared = {(name, encoding_class(name).equals_on_text) for name in list_encodings()
                if encoding_class(name).equals_on_text}
    assert declared == {("mrope", "rope")} and stated == declared
