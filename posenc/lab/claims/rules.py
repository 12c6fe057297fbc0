"""The rules every claim is decided by: "a extrapolates better than b" (a lower ratio
ppl(P) / ppl(L)), "a has a lower perplexity than b at n", and what a verdict says when a run
it rests on has not learned. Shared by the claims of :mod:`.claims` and :mod:`.recent_claims`;
the numbers and their noise come from :mod:`.evidence`.
"""

from __future__ import annotations

from collections.abc import Callable

from .evidence import (
    INCONCLUSIVE,
    NOT_TESTED,
    Runs,
    _missing,
    _not_learned,
    difference_text,
    fmt,
    fmt_est,
    less,
)

#: a run "stays near" its training-length perplexity if ppl(n) <= TOLERANCE * ppl(L)
TOLERANCE = 1.10
#: a claim's rule: the comparison's runs -> (verdict, evidence text)
ClaimFn = Callable[[Runs], tuple[str, str]]


def _with(text: str) -> str:
    """`` (text)`` when there is one (the paired noise a one-seed verdict rests on)."""
    return f" ({text})" if text else ""


def _guard(r: Runs, *labels: str) -> str | None:
    return _not_learned(r, *labels)


def _better_ratio(r: Runs, a: str, b: str) -> tuple[str, str]:
    """Claim "a's ppl(P)/ppl(L) < b's"."""
    ea, eb = r.ratio_est(a, r.probe), r.ratio_est(b, r.probe)
    miss = _missing((f"{a}@{r.probe}", ea), (f"{b}@{r.probe}", eb))
    if miss:
        return NOT_TESTED, miss
    text = (f"ratio ppl({r.probe})/ppl({r.train_len}): {a} {fmt_est(ea)} (ppl "
            f"{fmt(r.ppl(a, r.probe))}), {b} {fmt_est(eb)} (ppl {fmt(r.ppl(b, r.probe))})"
            + _with(difference_text(ea, eb)))
    guard = _guard(r, a, b)
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (less(ea, eb), text)


def _lower_ppl(r: Runs, a: str, b: str, n: int, guarded: tuple[str, ...]) -> tuple[str, str]:
    """Is run ``a``'s perplexity at length ``n`` below run ``b``'s, beyond the noise?
    Inconclusive while a run of ``guarded`` has not learned."""
    ea, eb = r.ppl_est(a, n), r.ppl_est(b, n)
    miss = _missing((f"{a}@{n}", ea), (f"{b}@{n}", eb))
    if miss:
        return NOT_TESTED, miss
    text = f"at {n}: {a} ppl {fmt_est(ea)} vs {b} {fmt_est(eb)}" + _with(difference_text(ea, eb))
    guard = _guard(r, *guarded)
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (less(ea, eb), text)
