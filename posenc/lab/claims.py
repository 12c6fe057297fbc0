"""The seed notes' claims about length extrapolation, checked against one comparison's numbers.

Each claim names its source, the rule that decides it from ``results.json`` and returns a
verdict: ``supported``, ``not supported`` or ``not tested`` (a run it needs is missing or
n/a). Ratios are ``ppl(n) / ppl(L)`` for a run's own training length L; "near" means within
``TOLERANCE`` (10 %).

The claims are about named encodings (ALiBi, RoPE, ...), so this module looks runs up by
encoding name; model and attention code never do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: a run "stays near" its training-length perplexity if ppl(n) <= TOLERANCE * ppl(L)
TOLERANCE = 1.10


@dataclass(frozen=True)
class Verdict:
    claim: str
    source: str
    rule: str
    verdict: str                 # "supported" | "not supported" | "not tested"
    evidence: str


class Runs:
    """Lookup of a results.json's runs by label (``rope``, ``rope+yarn:4``)."""

    def __init__(self, results: dict) -> None:
        self.config = results.get("config", {})
        self.by_label = {label_of(r): r for r in results.get("runs", [])}
        lengths = self.config.get("lengths") or sorted(
            {int(k) for r in results.get("runs", []) for k in r.get("ppl", {})})
        self.lengths = [int(n) for n in lengths]
        self.train_len = int(self.config.get("train_len", self.lengths[0] if self.lengths
                                             else 0))
        # the claims' probe length: 8L as in the ALiBi paper's plots, else the longest
        probe = 8 * self.train_len
        self.probe = probe if probe in self.lengths else max(self.lengths, default=0)

    def get(self, label: str) -> dict | None:
        return self.by_label.get(label)

    def ppl(self, label: str, length: int) -> float | None:
        run = self.get(label)
        value = None if run is None else run.get("ppl", {}).get(str(length))
        if value == "inf":
            return float("inf")
        return float(value) if isinstance(value, (int, float)) else None

    def note(self, label: str, length: int) -> str | None:
        run = self.get(label)
        value = None if run is None else run.get("ppl", {}).get(str(length))
        return value if isinstance(value, str) and value != "inf" else None

    def ratio(self, label: str, length: int) -> float | None:
        a, b = self.ppl(label, length), self.ppl(label, self.train_len)
        return None if a is None or b is None or b == 0 else a / b

    def scaled(self, kind: str) -> str | None:
        """Label of the RoPE run with an inference scaling of ``kind`` (``linear``), if any."""
        for label, run in self.by_label.items():
            spec = run.get("inference_scaling") or ""
            if run.get("encoding") == "rope" and spec.split("+")[0].split(":")[0] == kind \
                    and "+" not in spec:
                return label
        return None

    def entropy_tail(self, label: str, length: int) -> float | None:
        run = self.get(label)
        entry = (run or {}).get("entropy", {}) or {}
        value = entry.get(str(length))
        return value.get("tail") if isinstance(value, dict) else None


def label_of(run: dict) -> str:
    scaling = run.get("inference_scaling")
    return run["encoding"] + (f"+{scaling}" if scaling else "")


def factor_of(label: str) -> float | None:
    """The factor of a scaled label (``rope+yarn:4`` -> 4.0), None without one."""
    _, _, spec = label.partition("+")
    _, _, factor = spec.partition(":")
    try:
        return float(factor) if factor else None
    except ValueError:
        return None


def fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x == float("inf"):
        return "inf"
    if abs(x) >= 1e6:
        return f"{x:.2e}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.2f}" if abs(x) >= 10 else f"{x:.3f}"


def _missing(*pairs: tuple[str, float | None]) -> str | None:
    gone = [name for name, value in pairs if value is None]
    return f"missing or n/a: {', '.join(gone)}" if gone else None


def _verdict(ok: bool) -> str:
    return "supported" if ok else "not supported"


#: comparisons closer than this relative margin are flagged as weak (within noise)
WEAK_MARGIN = 0.02


def _margin(a: float, b: float) -> str:
    """A warning when a and b differ by less than WEAK_MARGIN of the larger."""
    big = max(abs(a), abs(b))
    return " (margin under 2 %: weak)" if big and abs(a - b) / big < WEAK_MARGIN else ""


ClaimFn = Callable[[Runs], tuple[str, str]]


def alibi_beats_rope(r: Runs) -> tuple[str, str]:
    a, b = r.ratio("alibi", r.probe), r.ratio("rope", r.probe)
    miss = _missing((f"alibi@{r.probe}", a), (f"rope@{r.probe}", b))
    if miss:
        return "not tested", miss
    return _verdict(a < b), (f"ppl ratio at {r.probe} vs {r.train_len}: alibi {fmt(a)} "
                             f"(ppl {fmt(r.ppl('alibi', r.probe))}), rope {fmt(b)} "
                             f"(ppl {fmt(r.ppl('rope', r.probe))}){_margin(a, b)}")


def absolute_do_not_extrapolate(r: Runs) -> tuple[str, str]:
    parts, ok, tested = [], True, False
    if r.get("learned") is not None:
        tested = True
        note = r.note("learned", r.probe)
        ratio = r.ratio("learned", r.probe)
        if note:
            parts.append(f"learned: {note}")
        else:
            ok &= ratio is not None and ratio > TOLERANCE
            parts.append(f"learned ratio {fmt(ratio)}")
    if r.get("sinusoidal") is not None:
        tested = True
        ratio = r.ratio("sinusoidal", r.probe)
        ok &= ratio is not None and ratio > TOLERANCE
        parts.append(f"sinusoidal ratio {fmt(ratio)} (ppl {fmt(r.ppl('sinusoidal', r.probe))})")
    if not tested:
        return "not tested", "missing: learned and sinusoidal runs"
    return _verdict(ok), f"at {r.probe}: " + "; ".join(parts)


def rope_direct_extrapolation_poor(r: Runs) -> tuple[str, str]:
    ratio = r.ratio("rope", r.probe)
    if ratio is None:
        return "not tested", f"missing or n/a: rope@{r.probe}"
    return _verdict(ratio > TOLERANCE), (f"rope ppl {fmt(r.ppl('rope', r.train_len))} at "
                                         f"{r.train_len} -> {fmt(r.ppl('rope', r.probe))} at "
                                         f"{r.probe} (ratio {fmt(ratio)})")


def rope_extrapolates_well(r: Runs) -> tuple[str, str]:
    ratio = r.ratio("rope", r.probe)
    if ratio is None:
        return "not tested", f"missing or n/a: rope@{r.probe}"
    return _verdict(ratio <= TOLERANCE), f"rope ratio at {r.probe}: {fmt(ratio)}"


def _target(r: Runs, label: str) -> int | None:
    factor = factor_of(label)
    if factor is None:
        return r.probe
    n = int(round(factor * r.train_len))
    return n if n in r.lengths else None


def interpolation_poor(r: Runs) -> tuple[str, str]:
    label = r.scaled("linear")
    if label is None:
        return "not tested", "missing: a rope+linear:F run"
    n = _target(r, label)
    lin, base = r.ppl(label, n) if n else None, r.ppl("rope", r.train_len)
    miss = _missing((f"{label}@{n}", lin), (f"rope@{r.train_len}", base))
    if miss:
        return "not tested", miss
    return _verdict(lin > TOLERANCE * base), (
        f"{label} at {n} (the length it stretches to): ppl {fmt(lin)} vs rope at "
        f"{r.train_len}: {fmt(base)} (ratio {fmt(lin / base)}); plain rope at {n}: "
        f"{fmt(r.ppl('rope', n))}; {label} at {r.train_len}: {fmt(r.ppl(label, r.train_len))}")


def ntk_works(r: Runs) -> tuple[str, str]:
    label = r.scaled("ntk")
    if label is None:
        return "not tested", "missing: a rope+ntk:F run"
    n = _target(r, label)
    ntk, plain, base = (r.ppl(label, n) if n else None, r.ppl("rope", n) if n else None,
                        r.ppl("rope", r.train_len))
    miss = _missing((f"{label}@{n}", ntk), (f"rope@{n}", plain), (f"rope@{r.train_len}", base))
    if miss:
        return "not tested", miss
    degraded = "still above" if ntk > base else "at or below"
    return _verdict(ntk < plain), (f"at {n}: {label} ppl {fmt(ntk)} vs plain rope "
                                   f"{fmt(plain)}; {degraded} rope's training-length ppl "
                                   f"{fmt(base)}{_margin(ntk, plain)}")


def logn_helps(r: Runs) -> tuple[str, str]:
    label = "rope+logn"
    a, b = r.ppl(label, r.probe), r.ppl("rope", r.probe)
    miss = _missing((f"{label}@{r.probe}", a), (f"rope@{r.probe}", b))
    if miss:
        return "not tested", miss
    return _verdict(a < b), (f"at {r.probe}: rope+logn ppl {fmt(a)} vs rope {fmt(b)}"
                             f"{_margin(a, b)}")


def entropy_grows(r: Runs) -> tuple[str, str]:
    grew, total, parts = 0, 0, []
    for label in r.by_label:
        run_lengths = [n for n in r.lengths if r.entropy_tail(label, n) is not None]
        if len(run_lengths) < 2 or run_lengths[0] != r.train_len:
            continue
        lo, hi = r.entropy_tail(label, run_lengths[0]), r.entropy_tail(label, run_lengths[-1])
        total += 1
        grew += hi > lo
        parts.append(f"{label} {fmt(lo)}->{fmt(hi)} (to {run_lengths[-1]})")
    if not total:
        return "not tested", "no entropy measured at two lengths"
    return _verdict(grew > total / 2), (f"tail entropy (nats) grew in {grew} of {total} runs: "
                                        + ", ".join(parts))


def logn_lowers_entropy(r: Runs) -> tuple[str, str]:
    lengths = [n for n in r.lengths if r.entropy_tail("rope+logn", n) is not None
               and r.entropy_tail("rope", n) is not None]
    if not lengths or lengths[-1] == r.train_len:
        return "not tested", "missing: entropy of rope and rope+logn past the training length"
    n = lengths[-1]
    a, b = r.entropy_tail("rope+logn", n), r.entropy_tail("rope", n)
    return _verdict(a < b), (f"tail entropy at {n}: rope+logn {fmt(a)} vs rope {fmt(b)} "
                             f"nats{_margin(a, b)}")


def rope_beats_alibi_in_length(r: Runs) -> tuple[str, str]:
    a, b = r.ppl("rope", r.train_len), r.ppl("alibi", r.train_len)
    miss = _missing((f"rope@{r.train_len}", a), (f"alibi@{r.train_len}", b))
    if miss:
        return "not tested", miss
    return _verdict(a < b), (f"at {r.train_len}: rope ppl {fmt(a)} vs alibi {fmt(b)}"
                             f"{_margin(a, b)}")


def alibi_sinusoidal_fastest(r: Runs) -> tuple[str, str]:
    def tps(label: str) -> float | None:
        run = r.get(label)
        return None if run is None else run.get("train_tokens_per_s")
    fast = {k: tps(k) for k in ("alibi", "sinusoidal")}
    slow = {k: tps(k) for k in ("rope", "t5")}
    miss = _missing(*fast.items(), *slow.items())
    if miss:
        return "not tested", miss
    text = ", ".join(f"{k} {v:,.0f}" for k, v in {**fast, **slow}.items())
    lo, hi = min(fast.values()), max(slow.values())
    return _verdict(lo > hi), (f"training tokens/s: {text} (one shared CPU: noisy)"
                               f"{_margin(lo, hi)}")


def scalings_soften_rope(r: Runs) -> tuple[str, str]:
    base = r.ppl("rope", r.probe)
    labels = [lab for lab in (r.scaled("yarn"), r.scaled("dynamic")) if lab]
    if base is None or not labels:
        return "not tested", "missing: rope and rope+yarn / rope+dynamic runs"
    vals = {lab: r.ppl(lab, r.probe) for lab in labels}
    miss = _missing(*vals.items())
    if miss:
        return "not tested", miss
    text = ", ".join(f"{k} {fmt(v)}" for k, v in vals.items())
    worst = max(vals.values())
    return _verdict(worst < base), f"at {r.probe}: rope {fmt(base)}; {text}{_margin(worst, base)}"


CLAIMS: tuple[tuple[str, str, str, ClaimFn], ...] = (
    ("ALiBi extrapolates better than RoPE",
     "seed 001 §3 (ALiBi)", "ratio ppl(P)/ppl(L) of alibi < that of rope",
     alibi_beats_rope),
    ("Learned and sinusoidal absolute positions do not extrapolate",
     "seed 001 §1.1 and §1.4, seed 004 §2.1-2.2", "learned is n/a past its table or its ratio > 1.10; "
     "sinusoidal ratio ppl(P)/ppl(L) > 1.10", absolute_do_not_extrapolate),
    ("Direct extrapolation (plain RoPE past its training length) is poor",
     "seed 001 §4.2 summary", "rope ratio ppl(P)/ppl(L) > 1.10",
     rope_direct_extrapolation_poor),
    ("RoPE handles texts longer than its training length well",
     "seed 004 §2.3 (contradicts seed 001)", "rope ratio ppl(P)/ppl(L) <= 1.10",
     rope_extrapolates_well),
    ("Interpolation (linear PI) without fine-tuning is poor",
     "seed 001 §4.2 summary", "rope+linear:F at F*L has ppl > 1.10 x rope's ppl at L",
     interpolation_poor),
    ("NTK-aware scaling works without fine-tuning (non-trivially, but below in-length "
     "quality)", "seed 001 §4.2 summary", "rope+ntk:F at F*L beats plain rope at F*L",
     ntk_works),
    ("log n scaling helps", "seed 001 §4.2 summary",
     "rope+logn ppl(P) < rope ppl(P)", logn_helps),
    ("Attention entropy grows with length", "seed 001 §4.3",
     "tail attention entropy at the longest measured length > at L, in most runs",
     entropy_grows),
    ("log n scaling counters the entropy growth", "seed 001 §4.2 table",
     "rope+logn tail entropy < rope's at the longest measured length", logn_lowers_entropy),
    ("Within the training length RoPE beats ALiBi (GLM ablation)", "seed 001 §4.4",
     "rope ppl(L) < alibi ppl(L)", rope_beats_alibi_in_length),
    ("ALiBi and sinusoidal train fastest, RoPE and T5 slower", "seed 004 §2.6",
     "min tokens/s of alibi, sinusoidal > max of rope, t5", alibi_sinusoidal_fastest),
    ("YaRN and dynamic NTK soften RoPE's degradation without fine-tuning",
     "issue 4 (expected at this scale)", "rope+yarn and rope+dynamic ppl(P) < rope ppl(P)",
     scalings_soften_rope),
)


def check_claims(results: dict) -> list[Verdict]:
    """Every claim's verdict for one results.json dict."""
    runs = Runs(results)
    out = []
    for claim, source, rule, fn in CLAIMS:
        verdict, evidence = fn(runs)
        rule_text = rule.replace("ppl(P)", f"ppl({runs.probe})").replace(
            "ppl(L)", f"ppl({runs.train_len})")
        out.append(Verdict(claim, source, rule_text, verdict, evidence))
    return out
