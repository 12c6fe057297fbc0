"""Pairs of trained runs whose numbers coincide, and the pairs for which that is expected by
construction (said in the report instead of "worth a look"): the lab's own pairs below, and
every encoding that declares which encoding it equals on text
(:attr:`~posenc.encodings.base.PositionalEncoding.equals_on_text`, e.g. M-RoPE and RoPE)."""

from __future__ import annotations

from ...encodings.registry import encoding_class, list_encodings
from ...eval.inference_scaling import run_label
from .evidence import Runs

#: why two encodings give identical numbers by construction, where they do
IDENTICAL_BY_CONSTRUCTION = {
    frozenset(("learned", "hierarchical")):
        "hierarchical's table is learned's (same parameter, same shape, same initialisation "
        "from the same seed) and within the trained table it serves position p as p_p "
        "exactly (u_j = alpha q_0 + (1 - alpha) q_j = p_j, Su 2020), so the two train and "
        "score identically up to L (up to float rounding: the same vector is computed in "
        "another order); they differ only past the table, where learned cannot run and "
        "hierarchical extends it",
    frozenset(("rope", "p_rope")):
        "p_rope drops only RoPE's lowest frequencies, which turn less than a tenth of a "
        "radian over the training length at the lab's shapes (L x 10000^(-2k/d) for each "
        "dropped pair k), so from the same seed the two train and score almost alike up to "
        "L; they part only far past L, where those frequencies turn further"
}


def by_construction(a: str, b: str) -> str | None:
    """Why encodings (or lab runs) ``a`` and ``b`` give identical numbers by construction, or
    None: a declared :attr:`equals_on_text` of either encoding, else the lab's own pairs."""
    for x, y in ((a, b), (b, a)):
        if x in list_encodings() and encoding_class(x).equals_on_text == y:
            return encoding_class(x).equals_on_text_because
    return IDENTICAL_BY_CONSTRUCTION.get(frozenset((a, b)))


#: numbers equal to this relative precision are "identical" (float rounding differs when the
#: same function is computed in another order)
SAME = 1e-5


def _same(x: float, y: float) -> bool:
    return abs(x - y) <= SAME * max(abs(x), abs(y), 1e-12)


def identical_runs_note(r: Runs, runs: list[dict]) -> list[str]:
    """A sentence per pair of trained runs whose perplexity at L and training curve are
    identical, with the reason where it is by construction."""
    trained = [run for run in runs if not run.get("inference_scaling")]
    out = []
    for i, a in enumerate(trained):
        for b in trained[:i]:
            pa, pb = r.ppl(run_label(a), r.train_len), r.ppl(run_label(b), r.train_len)
            ca, cb = ([p[1] for p in (x.get("curve") or [])] for x in (a, b))
            if pa is None or pb is None or not ca or len(ca) != len(cb) or not all(
                    _same(x, y) for x, y in zip([pa, *ca], [pb, *cb])):
                continue
            why = by_construction(a["encoding"], b["encoding"])
            out.append(f"{b['encoding']} and {a['encoding']} have identical numbers at L = "
                       f"{r.train_len} and identical training curves"
                       + (f" by construction: {why}." if why else
                          ": not expected by construction; worth a look."))
    return out
