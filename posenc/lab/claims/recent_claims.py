"""Claims of the papers since 2023 that the lab can test at its scale: per-layer RoPE/NoPE
hybrids, p-RoPE, the forget gate against ALiBi, stick-breaking attention against ALiBi, and
the training-free region methods.

Each entry is (claim, source with its place, rule, function) as in :mod:`.claims`, decided
by the same rules (:mod:`.rules`) against the same noise. A run the comparison lacks leaves
its claim "not tested"; the lab's variants (:mod:`posenc.lab.runs.variants`) supply p-RoPE,
the hybrids and stick-breaking.
"""

from __future__ import annotations

from .evidence import INCONCLUSIVE, NOT_TESTED, Runs, _all, _flip, _missing, above, fmt, fmt_est
from .rules import TOLERANCE, ClaimFn, _better_ratio, _guard, _lower_ppl

YANG = "Yang et al. (2025), Rope to Nope and Back Again: A New Hybrid Attention Strategy"
BARBERO = ("Barbero et al. (2024), Round and Round We Go! What makes Rotary Positional "
           "Encodings useful?")
LIN = "Lin et al. (2025), Forgetting Transformer: Softmax Attention with a Forget Gate"
JIN = "Jin et al. (2024), LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning"
XIAO = "Xiao et al. (2023), Efficient Streaming Language Models with Attention Sinks"
TAN = ("Tan, Shen, Yang, Courville and Panda (2025), ICLR, Scaling Stick-Breaking Attention: "
       "An Efficient Implementation and In-depth Study")
TAN_SOURCE = (f"{TAN}, abstract and section 5: compared with existing length-extrapolation "
              "methods on 350M-parameter models (softmax with position biases such as ALiBi, "
              "or RoPE), stick-breaking \"performs competitively\" on length generalisation, "
              "a model trained with a 2^11 context window performing well at 2^14; the lab's "
              "run has no positional encoding, as theirs")
YANG_SOURCE = (f"{YANG}, abstract: the hybrid \"surpasses conventional RoPE-based transformer "
               "models\" on long-context tasks (their tests are retrieval benchmarks such as "
               "needle-in-a-haystack and RULER after long-context training; the perplexity "
               "rule is this lab's reading)")


def windowed_hybrid_beats_rope(r: Runs) -> tuple[str, str]:
    return _better_ratio(r, "llama4_plan", "rope")


def full_hybrid_beats_rope(r: Runs) -> tuple[str, str]:
    return _better_ratio(r, "smollm3_plan", "rope")


def p_rope_beats_rope(r: Runs) -> tuple[str, str]:
    return _lower_ppl(r, "p_rope", "rope", r.train_len, ("rope", "p_rope"))


def p_rope_extrapolates_better(r: Runs) -> tuple[str, str]:
    return _better_ratio(r, "p_rope", "rope")


def forget_gate_beats_alibi(r: Runs) -> tuple[str, str]:
    verdicts, parts = [], []
    for n in dict.fromkeys((r.train_len, r.probe)):
        verdict, text = _lower_ppl(r, "forget_gate", "alibi", n, ("forget_gate", "alibi"))
        if verdict == NOT_TESTED:
            return verdict, text
        verdicts.append(verdict)
        parts.append(text)
    return _all(verdicts), "; ".join(parts)


def stick_breaking_beats_alibi_past_l(r: Runs) -> tuple[str, str]:
    return _lower_ppl(r, "stick_breaking", "alibi", r.probe, ("stick_breaking", "alibi"))


def self_extend_beats_rope(r: Runs) -> tuple[str, str]:
    label = r.scaled("self_extend")
    if label is None:
        return NOT_TESTED, "missing: a rope+self_extend:F run"
    return _lower_ppl(r, label, "rope", r.probe, ("rope",))


def streaming_stays_near(r: Runs) -> tuple[str, str]:
    label = r.scaled("streaming")
    if label is None:
        return NOT_TESTED, "missing: a rope+streaming run"
    est = r.ratio_est(label, r.probe)
    miss = _missing((f"{label}@{r.probe}", est))
    if miss:
        return NOT_TESTED, miss
    text = (f"{label} ratio ppl({r.probe})/ppl({r.train_len}) {fmt_est(est)} (ppl "
            f"{fmt(r.ppl(label, r.probe))}; plain rope {fmt(r.ppl('rope', r.probe))})")
    guard = _guard(r, "rope")
    stays_near = _flip(above(est, TOLERANCE))           # supported when it is not above
    return (INCONCLUSIVE, f"{guard}; {text}") if guard else (stays_near, text)


RECENT_CLAIMS: tuple[tuple[str, str, str, ClaimFn], ...] = (
    ("A RoPE/NoPE hybrid with windowed RoPE layers extrapolates better than all-RoPE",
     f"{YANG_SOURCE}; their RNoPE-SWA gives the RoPE layers a sliding window, the lab's "
     "llama4_plan a chunked one",
     "ratio ppl(P)/ppl(L) of llama4_plan < that of rope", windowed_hybrid_beats_rope),
    ("A RoPE/NoPE hybrid with full attention extrapolates better than all-RoPE",
     f"{YANG_SOURCE}; SmolLM3's plan keeps every layer's attention full",
     "ratio ppl(P)/ppl(L) of smollm3_plan < that of rope", full_hybrid_beats_rope),
    ("p-RoPE (dropping the lowest frequencies) beats RoPE within the training length",
     f"{BARBERO}, Table 2: Gemma 2B models trained from scratch at 8k tokens on Wiki and "
     "FlanV2; truncating the lowest frequencies keeps and seems to improve the validation "
     "perplexity (the lab's p_rope keeps 3/4 of the frequencies, as their 0.75-RoPE)",
     "p_rope ppl(L) < rope ppl(L)", p_rope_beats_rope),
    ("p-RoPE extrapolates better than RoPE",
     f"not a result of {BARBERO}: their perplexities are at the training length (Table 2); "
     "the question past it is this lab's",
     "ratio ppl(P)/ppl(L) of p_rope < that of rope", p_rope_extrapolates_better),
    ("The forget gate (data-dependent decay) beats ALiBi's fixed decay",
     f"{LIN}, abstract: FoX \"outperforms the Transformer on long-context language modeling, "
     "length extrapolation\"; a forget gate fixed per head is ALiBi's bias, so the lab "
     "compares the two decays directly",
     "forget_gate ppl(L) < alibi ppl(L) and forget_gate ppl(P) < alibi ppl(P)",
     forget_gate_beats_alibi),
    ("Stick-breaking attention, without a positional encoding, extrapolates at least as well "
     "as ALiBi", TAN_SOURCE, "stick_breaking ppl(P) < alibi ppl(P) (within noise: "
     "inconclusive)", stick_breaking_beats_alibi_past_l),
    ("Self-Extend lengthens RoPE's context without tuning",
     f"{JIN}, abstract: Self-Extend extends existing LLMs' context windows without "
     "fine-tuning (the perplexity rule is this lab's reading)",
     "rope+self_extend:F ppl(P) < plain rope ppl(P)", self_extend_beats_rope),
    ("Attention sinks plus a window keep perplexity stable past the training length",
     f"{XIAO}, abstract: StreamingLLM gives \"stable and efficient language modeling\" on up to "
     "4 million tokens (their models are pretrained LLMs whose first tokens act as sinks; "
     "this lab's small RoPE model may not have formed such sinks)",
     "rope+streaming ratio ppl(P)/ppl(L) <= 1.10", streaming_stays_near),
)
