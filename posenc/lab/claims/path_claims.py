"""The claims of PaTH attention (Yang et al., 2025) that the lab can test at its scale: PaTH
against RoPE within and past the training length, and PaTH-FoX against the forget gate alone.

Each entry is (claim, source with its place, rule, function) as in :mod:`.claims`, decided
by the same rules (:mod:`.rules`) against the same noise; a run the comparison lacks leaves
its claim "not tested". The state-tracking claim is the task study's (``posenc tasks``).
"""

from __future__ import annotations

from .evidence import NOT_TESTED, Runs, _all
from .rules import ClaimFn, _lower_ppl

PATH = ("Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim (2025), PaTH Attention: Position "
        "Encoding via Accumulating Householder Transformations (NeurIPS 2025)")


def path_beats_rope_in_length(r: Runs) -> tuple[str, str]:
    return _lower_ppl(r, "path", "rope", r.train_len, ("path", "rope"))


def path_beats_rope_past_length(r: Runs) -> tuple[str, str]:
    return _lower_ppl(r, "path", "rope", r.probe, ("path", "rope"))


def path_fox_beats_forget_gate(r: Runs) -> tuple[str, str]:
    verdicts, parts = [], []
    for n in dict.fromkeys((r.train_len, r.probe)):
        verdict, text = _lower_ppl(r, "path_fox", "forget_gate", n, ("path_fox", "forget_gate"))
        if verdict == NOT_TESTED:
            return verdict, text
        verdicts.append(verdict)
        parts.append(text)
    return _all(verdicts), "; ".join(parts)


PATH_CLAIMS: tuple[tuple[str, str, str, ClaimFn], ...] = (
    ("PaTH beats RoPE within the training length",
     f"{PATH}, abstract and Section 4 (language modelling from scratch): PaTH \"improves "
     "upon RoPE and other recent baselines\" (their models are far larger than the lab's)",
     "path ppl(L) < rope ppl(L)", path_beats_rope_in_length),
    ("PaTH beats RoPE past the training length",
     f"{PATH}, Section 4 (length extrapolation): RoPE degrades past its training context "
     "while PaTH's data-dependent transforms carry no position to fall out of range",
     "path ppl(P) < rope ppl(P)", path_beats_rope_past_length),
    ("PaTH-FoX beats the forget gate alone (FoX)",
     f"{PATH}, PaTH-FoX (Section 3) and the length-extrapolation results (Section 4): adding "
     "PaTH's transforms to FoX's forget gate gives the best results in and past the training "
     "length (the lab's path_fox adds its summed log-gates before the 1/sqrt(D) scale, as "
     "fla's layer; forget_gate after it)",
     "path_fox ppl(L) < forget_gate ppl(L) and path_fox ppl(P) < forget_gate ppl(P)",
     path_fox_beats_forget_gate),
)
