"""Published claims about length extrapolation, checked against one comparison's numbers.

Each claim names its published source (authors, year, title), the rule that decides it from
``results.json``, and a verdict decided against noise by :mod:`posenc.lab.claims.evidence`
(``supported``, ``not supported``, ``inconclusive``, ``too few samples``, ``not tested``). Ratios are
``ppl(n) / ppl(L)`` for a run's own training length L; "near" means within ``TOLERANCE``
(10 %, :mod:`.rules`). Timing claims use the interleaved step timing of
:mod:`posenc.lab.compare.timing`, never one training run's tokens/s.
"""

from __future__ import annotations

from ...study import Verdict
from .drope_claims import DROPE_CLAIMS
from .evidence import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    NOT_TESTED,
    SUPPORTED,
    TOO_FEW,
    TOO_FEW_TEXT,
    Runs,
    _all,
    _flip,
    _missing,
    above,
    difference_text,
    factor_of,
    fmt,
    fmt_est,
    less,
)
from .path_claims import PATH_CLAIMS
from .recent_claims import RECENT_CLAIMS
from .rules import TOLERANCE, ClaimFn, _better_ratio, _guard, _lower_ppl, _with
from .stats import Estimate

PRESS = "Press, Smith and Lewis (2022), Train Short, Test Long (ALiBi)"
CHEN = "Chen et al. (2023), Extending Context Window of LLMs via Positional Interpolation"
PENG = "Peng et al. (2023), YaRN: Efficient Context Window Extension of LLMs"
SU = "Su et al. (2021), RoFormer: Enhanced Transformer with Rotary Position Embedding"
CHIANG = "Chiang and Cholak (2022), Overcoming a Theoretical Limitation of Self-Attention"


def alibi_beats_rope(r: Runs) -> tuple[str, str]:
    return _better_ratio(r, "alibi", "rope")


def t5_beats_rope(r: Runs) -> tuple[str, str]:
    return _better_ratio(r, "t5", "rope")


def absolute_do_not_extrapolate(r: Runs) -> tuple[str, str]:
    parts, verdicts = [], []
    if r.get("learned") is not None:
        note = r.note("learned", r.probe)
        if note:
            parts.append(f"learned: {note}")
            verdicts.append(SUPPORTED)
        else:
            est = r.ratio_est("learned", r.probe)
            verdicts.append(above(est, TOLERANCE) if est else NOT_TESTED)
            parts.append(f"learned ratio {fmt_est(est)}")
    if r.get("sinusoidal") is not None:
        est = r.ratio_est("sinusoidal", r.probe)
        verdicts.append(above(est, TOLERANCE) if est else NOT_TESTED)
        parts.append(f"sinusoidal ratio {fmt_est(est)} (ppl "
                     f"{fmt(r.ppl('sinusoidal', r.probe))})")
    if not verdicts or NOT_TESTED in verdicts:
        return NOT_TESTED, "missing: learned and sinusoidal runs" if not parts else \
            f"at {r.probe}: " + "; ".join(parts)
    text = f"at {r.probe}: " + "; ".join(parts)
    guard = _guard(r, *[e for e in ("learned", "sinusoidal") if r.get(e) is not None])
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (_all(verdicts), text)


def _rope_ratio(r: Runs) -> tuple[Estimate | None, str]:
    est = r.ratio_est("rope", r.probe)
    return est, (f"rope ppl {fmt_est(r.ppl_est('rope', r.train_len))} at {r.train_len} -> "
                 f"{fmt_est(r.ppl_est('rope', r.probe))} at {r.probe} (ratio {fmt_est(est)})")


def rope_direct_extrapolation_poor(r: Runs) -> tuple[str, str]:
    est, text = _rope_ratio(r)
    if est is None:
        return NOT_TESTED, f"missing or n/a: rope@{r.probe}"
    guard = _guard(r, "rope")
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (above(est, TOLERANCE), text)


def rope_extrapolates_well(r: Runs) -> tuple[str, str]:
    verdict, text = rope_direct_extrapolation_poor(r)
    return (_flip(verdict), text)


def _target(r: Runs, label: str) -> int | None:
    factor = factor_of(label)
    if factor is None:
        return r.probe
    n = int(round(factor * r.train_len))
    return n if n in r.lengths else None


def interpolation_poor(r: Runs) -> tuple[str, str]:
    label = r.scaled("linear")
    if label is None:
        return NOT_TESTED, "missing: a rope+linear:F run"
    n = _target(r, label)
    lin, base = r.ppl_est(label, n) if n else None, r.ppl_est("rope", r.train_len)
    miss = _missing((f"{label}@{n}", lin), (f"rope@{r.train_len}", base))
    if miss:
        return NOT_TESTED, miss
    bar = Estimate(TOLERANCE * base.mean, TOLERANCE * base.spread, base.kind, base.n,
                   None if base.samples is None else TOLERANCE * base.samples)
    text = (f"{label} at {n} (the length it stretches to): ppl {fmt_est(lin)} vs 1.10 x rope "
            f"at {r.train_len}: {fmt_est(bar)}{_with(difference_text(lin, bar))}; plain rope "
            f"at {n}: {fmt(r.ppl('rope', n))}")
    guard = _guard(r, "rope")
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (less(bar, lin), text)


def _scaling_beats_rope(r: Runs, kinds: tuple[str, ...], at: str) -> tuple[str, str]:
    labels = [lab for lab in (r.scaled(k) for k in kinds) if lab]
    if len(labels) < len(kinds):
        return NOT_TESTED, f"missing: rope with {' and '.join(kinds)} scaling"
    verdicts, parts = [], []
    for label in labels:
        n = _target(r, label) if at == "target" else r.probe
        a, b = (r.ppl_est(label, n), r.ppl_est("rope", n)) if n else (None, None)
        miss = _missing((f"{label}@{n}", a), (f"rope@{n}", b))
        if miss:
            return NOT_TESTED, miss
        verdicts.append(less(a, b))
        parts.append(f"at {n}: {label} ppl {fmt_est(a)} vs plain rope {fmt_est(b)}"
                     + _with(difference_text(a, b)))
    text = "; ".join(parts)
    guard = _guard(r, "rope")
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (_all(verdicts), text)


def ntk_works(r: Runs) -> tuple[str, str]:
    return _scaling_beats_rope(r, ("ntk",), "target")


def scalings_soften_rope(r: Runs) -> tuple[str, str]:
    return _scaling_beats_rope(r, ("yarn", "dynamic"), "probe")


def logn_helps(r: Runs) -> tuple[str, str]:
    return _lower_ppl(r, "rope+logn", "rope", r.probe, ("rope",))


def entropy_grows(r: Runs) -> tuple[str, str]:
    verdicts, parts = [], []
    for label in r.by_label:
        run_lengths = [n for n in r.lengths if r.entropy_est(label, n) is not None]
        if len(run_lengths) < 2 or run_lengths[0] != r.train_len or r.learned(label) is False:
            continue
        lo, hi = r.entropy_est(label, run_lengths[0]), r.entropy_est(label, run_lengths[-1])
        verdicts.append(less(lo, hi))
        parts.append(f"{label} {fmt_est(lo)} -> {fmt_est(hi)}")
    if not verdicts:
        return NOT_TESTED, "no entropy measured at two lengths"
    grew, fell = verdicts.count(SUPPORTED), verdicts.count(NOT_SUPPORTED)
    verdict = SUPPORTED if grew > len(verdicts) / 2 else (
        NOT_SUPPORTED if fell > len(verdicts) / 2 else INCONCLUSIVE)
    return verdict, (f"tail entropy (nats) grew beyond noise in {grew} and fell in {fell} of "
                     f"{len(verdicts)} runs: " + ", ".join(parts))


def logn_lowers_entropy(r: Runs) -> tuple[str, str]:
    lengths = [n for n in r.lengths if r.entropy_est("rope+logn", n) is not None
               and r.entropy_est("rope", n) is not None]
    if not lengths or lengths[-1] == r.train_len:
        return NOT_TESTED, "missing: entropy of rope and rope+logn past the training length"
    n = lengths[-1]
    a, b = r.entropy_est("rope+logn", n), r.entropy_est("rope", n)
    text = (f"tail entropy at {n}: rope+logn {fmt_est(a)} vs rope {fmt_est(b)} nats"
            + _with(difference_text(a, b)))
    guard = _guard(r, "rope")
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (less(a, b), text)


def rope_beats_alibi_in_length(r: Runs) -> tuple[str, str]:
    return _lower_ppl(r, "rope", "alibi", r.train_len, ("rope", "alibi"))


def alibi_sinusoidal_fastest(r: Runs) -> tuple[str, str]:
    times = {k: r.step_time(k) for k in ("alibi", "sinusoidal", "rope", "t5")}
    miss = _missing(*times.items())
    if miss:
        return NOT_TESTED, miss + " (interleaved step timing)"
    verdicts = [less(times[f], times[s]) for f in ("alibi", "sinusoidal") for s in ("rope", "t5")]
    rounds = (r.results.get("timing") or {}).get("rounds")
    text = (f"training-step time relative to each round's median over {rounds} interleaved "
            "rounds: " + ", ".join(f"{k} {fmt_est(v)}" for k, v in times.items()))
    return _all(verdicts), text


CLAIMS: tuple[tuple[str, str, str, ClaimFn], ...] = (
    ("ALiBi extrapolates better than RoPE", f"{PRESS}, Figure 1",
     "ratio ppl(P)/ppl(L) of alibi < that of rope", alibi_beats_rope),
    ("The T5 bias extrapolates better than RoPE", f"{PRESS}, Figure 1 and Table 2",
     "ratio ppl(P)/ppl(L) of t5 < that of rope", t5_beats_rope),
    ("Learned and sinusoidal absolute positions do not extrapolate",
     f"{PRESS}, Section 2 and Figure 1", "learned is n/a past its table or its ratio > 1.10; "
     "sinusoidal ratio ppl(P)/ppl(L) > 1.10", absolute_do_not_extrapolate),
    ("Direct extrapolation (plain RoPE past its training length) is poor",
     f"{CHEN}; {PRESS}, Figure 1", "rope ratio ppl(P)/ppl(L) > 1.10",
     rope_direct_extrapolation_poor),
    ("RoPE handles texts longer than its training length well",
     f"{SU}, abstract: RoPE enables \"the flexibility of sequence length\" (a property of "
     "the encoding: it is defined at every position; the paper reports no perplexity past "
     "the training length, so the rule is this lab's reading)",
     "rope ratio ppl(P)/ppl(L) <= 1.10", rope_extrapolates_well),
    ("Interpolation (linear PI) without fine-tuning is poor",
     f"{CHEN} (PI is followed by fine-tuning); {PENG}, Section 3",
     "rope+linear:F at F*L has ppl > 1.10 x rope's ppl at L", interpolation_poor),
    ("NTK-aware scaling works without fine-tuning", f"{PENG}, Section 3 (NTK-aware interpolation)",
     "rope+ntk:F at F*L beats plain rope at F*L", ntk_works),
    ("log n scaling helps", f"{CHIANG} (log-length scaled attention)",
     "rope+logn ppl(P) < rope ppl(P)", logn_helps),
    ("Attention entropy grows with length", f"{CHIANG}; {PENG}, Section 3 (attention temperature)",
     "tail attention entropy grows beyond noise from L to the longest measured length, in "
     "most runs", entropy_grows),
    ("log n scaling counters the entropy growth", f"{CHIANG}",
     "rope+logn tail entropy < rope's at the longest measured length", logn_lowers_entropy),
    ("Within the training length RoPE beats ALiBi",
     "Zeng et al. (2022), GLM-130B: An Open Bilingual Pre-trained Model, ICLR 2023, "
     "Section 2.1, paragraph \"Positional Encoding and FFNs\": after empirical tests "
     "GLM-130B adopts RoPE rather than ALiBi; the comparison's numbers are not given there, "
     "so the rule tests the within-length comparison directly",
     "rope ppl(L) < alibi ppl(L)", rope_beats_alibi_in_length),
    ("ALiBi and sinusoidal train fastest, RoPE and T5 slower",
     f"{PRESS}, Table 1 (training speed)",
     "step time of alibi and sinusoidal < that of rope and t5 (interleaved timing)",
     alibi_sinusoidal_fastest),
    ("YaRN and dynamic NTK soften RoPE's degradation without fine-tuning",
     f"{PENG}, Section 3 (dynamic scaling, YaRN)",
     "rope+yarn and rope+dynamic ppl(P) < rope ppl(P)",
     scalings_soften_rope),
)


def check_claims(results: dict) -> list[Verdict]:
    """Every claim's verdict for one results.json dict."""
    runs = Runs(results)
    out = []
    for claim, source, rule, fn in CLAIMS + RECENT_CLAIMS + DROPE_CLAIMS + PATH_CLAIMS:
        verdict, evidence = fn(runs)
        if verdict == TOO_FEW and not evidence.startswith(TOO_FEW):
            evidence = f"{TOO_FEW_TEXT}; {evidence}"
        rule_text = rule.replace("ppl(P)", f"ppl({runs.probe})").replace(
            "ppl(L)", f"ppl({runs.train_len})")
        out.append(Verdict(claim, source, verdict, evidence, rule_text))
    return out
