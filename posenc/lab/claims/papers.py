"""The lab's extrapolation set beside published numbers: the ALiBi paper's perplexity ratios
and Kazemnejad et al.'s ordering of encodings, one table for one or several corpora.

Press, Smith and Lewis (2022), "Train Short, Test Long", ICLR 2022, appendix Table 3
(WikiText-103, models trained at L = 1024, non-overlapping evaluation): perplexity at
L_valid = 1024, 2024 (about 2L) and 6024 (about 6L), as printed in that table (checked
against the paper's full text). Their Table 2 (models trained at L = 512; e.g. rotary
20.07 at 512, 21.37 at 1012, 31.58 at 2512) has the same ordering at about 2x and 5x. The
lab's ratios are ppl(kL) / ppl(L) at its own lengths (L, 2L, 4L, 8L), so "about 2x" is
matched exactly and the paper's ~6x sits between the lab's 4L and 8L.

Kazemnejad et al. (2023), "The Impact of Positional Encoding on Length Generalization in
Transformers", NeurIPS 2023: on their synthetic tasks (decoder-only, trained on short
instances, tested on longer ones) NoPE and T5's relative bias generalise best, ALiBi, RoPE and
absolute (sinusoidal) encodings worse (:data:`~.kazemnejad.KAZEMNEJAD_PAIRS`). Here
the pairs are read on language modelling: "a extrapolates better than b" = a's ratio
ppl(P) / ppl(L) is below b's beyond noise.
"""

from __future__ import annotations

from ...study import markdown_table
from .evidence import NOT_SUPPORTED, SUPPORTED, Runs, fmt, fmt_est, less
from .kazemnejad import KAZEMNEJAD_PAIRS

PRESS_TABLE = "Press, Smith and Lewis (2022), ICLR, appendix Table 3 (WikiText-103, L = 1024)"
KAZEMNEJAD = "Kazemnejad et al. (2023), NeurIPS"
#: perplexity at L_valid = 1024 (L), 2024, 6024: Press et al. (2022), appendix Table 3
PRESS_PPL = {"sinusoidal": (19.34, 51.09, 214.02), "rope": (19.33, 31.17, 54.78),
             "t5": (18.80, 18.34, 21.76), "alibi": (18.66, 18.05, 18.01)}
#: perplexity at L_valid = 512 (L), 1012, 2512: Press et al. (2022), appendix Table 2
PRESS_TABLE2_PPL = {"sinusoidal": (20.05, 43.54, 132.41), "rope": (20.07, 21.37, 31.58),
                    "t5": (19.65, 18.79, 20.41), "alibi": (19.73, 18.73, 18.41)}
#: how the ALiBi paper (Press et al., 2022) names the encodings it compares
ALIBI_PAPER_NAMES = {"alibi": "ALiBi", "t5": "T5 bias", "rope": "rotary",
                     "sinusoidal": "sinusoidal"}


def press_ratio(encoding: str, column: int) -> float:
    """The paper's ppl(L_valid) / ppl(L) for ``column`` 1 (2024) or 2 (6024)."""
    row = PRESS_PPL[encoding]
    return row[column] / row[0]


def _order(values: dict[str, float]) -> list[str]:
    return sorted(values, key=values.get)


def press_rows(runs: dict[str, Runs]) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, rows, lines): per encoding the paper's ratios at ~2x and ~6x beside the lab's
    at 2L and at its probe length on every corpus; lines say per corpus whether the ordering
    by ratio at the probe is the paper's."""
    header = ["encoding", "paper 2024/1024", "paper 6024/1024"]
    for corpus, r in runs.items():
        header += [f"{corpus}: {2 * r.train_len}/{r.train_len}",
                   f"{corpus}: {r.probe}/{r.train_len}"]
    rows = []
    for enc in PRESS_PPL:
        row = [ALIBI_PAPER_NAMES[enc], fmt(press_ratio(enc, 1)), fmt(press_ratio(enc, 2))]
        for r in runs.values():
            row += [fmt_est(r.ratio_est(enc, 2 * r.train_len)), fmt_est(r.ratio_est(enc, r.probe))]
        rows.append(row)
    paper = _order({e: press_ratio(e, 2) for e in PRESS_PPL})
    lines = ["Paper, best-extrapolating first at ~6x: "
             + " > ".join(ALIBI_PAPER_NAMES[e] for e in paper) + "."]
    for corpus, r in runs.items():
        ours = {e: r.ratio(e, r.probe) for e in PRESS_PPL}
        ours = {e: v for e, v in ours.items() if v is not None}
        if len(ours) < 2:
            lines.append(f"{corpus}: fewer than two of these encodings evaluated at {r.probe}.")
            continue
        order = _order(ours)
        same = order == [e for e in paper if e in ours]
        ests = {e: r.ratio_est(e, r.probe) for e in order}
        tied = [f"{ALIBI_PAPER_NAMES[a]} and {ALIBI_PAPER_NAMES[b]}"
                for a, b in zip(order, order[1:])
                if ests[a] is None or ests[b] is None or less(ests[a], ests[b]) != SUPPORTED]
        lines.append(f"{corpus} at {r.probe}: " + " > ".join(ALIBI_PAPER_NAMES[e] for e in order)
                     + (": the paper's ordering" if same else ": not the paper's ordering")
                     + (f" (by the means; within noise: {'; '.join(tied)})." if tied
                        else ", every step beyond noise."))
    return header, rows, lines


def kazemnejad_rows(runs: dict[str, Runs]) -> tuple[list[str], list[list[str]]]:
    """Per pair of :data:`KAZEMNEJAD_PAIRS` ("a generalises better than b") and corpus: whether
    a's ratio at the probe length is below b's beyond noise (agrees / disagrees / within
    noise / not run)."""
    header = ["pair (paper: first is better)"] + list(runs)
    rows = []
    for a, b in KAZEMNEJAD_PAIRS:
        row = [f"{a} vs {b}"]
        for r in runs.values():
            ea, eb = r.ratio_est(a, r.probe), r.ratio_est(b, r.probe)
            if ea is None or eb is None:
                row.append("not run")
                continue
            verdict = less(ea, eb)
            word = {SUPPORTED: "agrees", NOT_SUPPORTED: "disagrees"}.get(verdict,
                                                                        "within noise")
            row.append(f"{word} ({fmt_est(ea)} vs {fmt_est(eb)})")
        rows.append(row)
    return header, rows


def papers_section(runs: dict[str, Runs]) -> list[str]:
    """The markdown section: the ALiBi paper's ratios and Kazemnejad et al.'s pairs beside
    the lab's numbers, one column group per corpus."""
    header, rows, lines = press_rows(runs)
    k_header, k_rows = kazemnejad_rows(runs)
    return (["## Against the papers' numbers", "",
             f"Perplexity ratio ppl(n) / ppl(L): the paper's from {PRESS_TABLE}: perplexity "
             "at 1024 / 2024 / 6024 = " + "; ".join(
                 f"{ALIBI_PAPER_NAMES[e]} {' / '.join(f'{v:g}' for v in PRESS_PPL[e])}"
                 for e in PRESS_PPL)
             + ". Their Table 2 (trained at L = 512) gives the same ordering at about 2x "
             "and 5x (ratios at 1012 / 2512: " + "; ".join(
                 f"{ALIBI_PAPER_NAMES[e]} {fmt(v[1] / v[0])} / {fmt(v[2] / v[0])}"
                 for e, v in PRESS_TABLE2_PPL.items())
             + "). The lab's ratios are mean ± spread at 2L and at P.", ""]
            + markdown_table(header, rows) + [""] + [f"- {line}" for line in lines] + ["",
            f"{KAZEMNEJAD}, abstract (decoder-only models on synthetic reasoning and "
            "mathematical tasks, not language modelling): \"the most commonly used positional "
            "encoding methods, such as ALiBi, Rotary, and APE, are not well suited for length "
            "generalization in downstream tasks\" and \"NoPE outperforms other explicit "
            "positional encoding methods\"; T5's relative bias is the explicit encoding that "
            "comes closest in their results (their per-task figures are not quoted here: they "
            "could not be checked). Each of their pairs read on this lab's ratio "
            "ppl(P) / ppl(L):", ""]
            + markdown_table(k_header, k_rows))
