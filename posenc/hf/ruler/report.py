"""RULER's part of the arena report (:mod:`posenc.hf.arena_report`): per family a table of
mean scores ± spread (method x length), one heat map panel per family (ruler.png: methods down,
lengths across), what counts toward verdicts, and the verdicts.

The noise and verdict rules are the arena's: a cell's samples are resampled (bootstrap,
paired across methods, as every method answers the same prompts), the spread is at least the
smoothed binomial standard error, intervals that overlap are inconclusive, fewer than
:data:`~posenc.study.MIN_SAMPLES` samples over the lengths beyond the original abstain, and a
family counts only when 'none' scores at least :data:`~posenc.hf.arena_report.SOLVED_AT` at
the longest RULER length within the original context.
"""

from __future__ import annotations

from pathlib import Path

from ...methods import spec_citation
from ...study import (
    MIN_SAMPLES,
    RunDirectory,
    Verdict,
    markdown_table,
    too_few_samples,
)
from ...viz.axes import save_png
from ...viz.heatmaps import accuracy_heatmaps
from ..arena_estimates import SOLVED_AT, against_none, hit_estimate
from . import FAMILIES, SOURCE

FIGURE = "ruler.png"
RULE = ("RULER: mean score ± spread (bootstrap std over samples, at least the binomial "
        "standard error) over the RULER lengths beyond the original; overlapping intervals "
        f"are inconclusive; fewer than {MIN_SAMPLES} samples over those lengths abstain: too "
        "few samples")


def ran(results: dict) -> list[str]:
    """The RULER families this arena runs (none in files older than RULER's)."""
    return list(results["setting"].get("tasks") or []) if "ruler" in results else []


def ruler_estimate(results: dict, family: str, method: str, lengths: list[int]):
    """(mean score, spread) of ``method`` on ``family`` over ``lengths``, or None."""
    cells = results["ruler"].get(family, {}).get(method, {})
    return hit_estimate(cells, [str(n) for n in lengths])


def _lengths(results: dict) -> tuple[list[int], list[int]]:
    """(RULER lengths within the original context, those beyond)."""
    o = results["original"]
    lengths = results.get("ruler_lengths") or []
    return [n for n in lengths if n <= o], [n for n in lengths if n > o]


def counted_families(results: dict) -> dict[str, tuple[bool, str]]:
    """family -> (whether it counts toward verdicts, why)."""
    base, _ = _lengths(results)
    out = {}
    for family in ran(results):
        if "none" not in results["methods"]:
            out[family] = (False, "'none' was not run, so nothing shows the task is solvable")
        elif not base:
            out[family] = (False, f"no RULER length within the original context "
                                  f"({results['original']})")
        else:
            est = ruler_estimate(results, family, "none", [max(base)])
            if est is None:
                out[family] = (False, "not measured yet")
            else:
                ok = est[0] >= SOLVED_AT
                out[family] = (ok, f"'none' score at {max(base)}: {est[0]:.2f} "
                                   f"({'>=' if ok else '<'} {SOLVED_AT})")
    return out


def ruler_verdicts(results: dict) -> list[Verdict]:
    """One verdict per extended method and family: does it beat 'none' beyond the original?"""
    _, beyond = _lengths(results)
    counted, original = counted_families(results), results["original"]
    out = []
    for method in results["methods"]:
        if method == "none":
            continue
        for family in ran(results):
            claim = (f"{method} beats no extension on RULER {FAMILIES[family].title} beyond "
                     f"{original} tokens")
            source = f"{spec_citation(method)}; task: {SOURCE}"
            a = ruler_estimate(results, family, method, beyond)
            b = ruler_estimate(results, family, "none", beyond)
            count = len(beyond) * results["setting"]["ruler_samples"]
            at = ", ".join(map(str, beyond))
            out.append(against_none(
                claim, source, RULE, counted[family],
                None if beyond else f"no RULER length beyond {original}", a, b,
                lambda: too_few_samples(count, "samples over the lengths" if count != 1
                                        else "sample over the lengths"),
                lambda spreads: (f"score {a[0]:.2f} ± {a[1]:.2f} ({method}) vs "
                                 f"{b[0]:.2f} ± {b[1]:.2f} (none) at {at}") if spreads else
                f"score {a[0]:.2f} ({method}) vs {b[0]:.2f} (none) at {at}",
                lower_better=False))
    return out


def ruler_section(results: dict) -> list[str]:
    """The report's RULER section (empty when no family ran)."""
    families = ran(results)
    if not families:
        return []
    o, samples = results["original"], results["setting"]["ruler_samples"]
    lengths = results.get("ruler_lengths") or []
    head = ["method"] + [f"{n} ({n / o:g}x)" for n in lengths]
    lines = ["", "## RULER", "",
             f"RULER's task families ({SOURCE}), built from the arena's text; {samples} "
             f"sample{'' if samples == 1 else 's'} per length, each answered by greedy "
             "decoding and scored by string match over all references (the share of "
             "references the answer contains); ± the bootstrap std over samples, at least "
             "the binomial standard error.", "",
             f"![RULER]({FIGURE})", "", f"Verdict rule: {RULE}."]
    for family in families:
        rows = []
        for method in results["methods"]:
            cells = []
            for n in lengths:
                est = ruler_estimate(results, family, method, [n])
                cells.append("…" if est is None else f"{est[0]:.2f} ± {est[1]:.2f}")
            rows.append([method] + cells)
        lines += ["", f"### {FAMILIES[family].title}", ""] + markdown_table(head, rows)
    return lines


def ruler_heatmaps(results: dict):
    """The figure of ruler.png: one panel per family, methods down and lengths across."""
    lengths, methods = results.get("ruler_lengths") or [], results["methods"]
    grids = {}
    for family in ran(results):
        grids[FAMILIES[family].title] = [
            [float("nan") if (e := ruler_estimate(results, family, m, [n])) is None
             else e[0] for n in lengths] for m in methods]
    return accuracy_heatmaps(grids, lengths, [0.0] * len(methods),
                             f"RULER: {Path(results['model']).name}, extended from "
                             f"{results['original']} tokens (outlined: the original context)",
                             results["original"], "method",
                             per_cell=results["setting"]["ruler_samples"], trial="sample",
                             row_labels=methods, value_label="score (string match)")


def ruler_figure(results: dict, directory: RunDirectory) -> list[Path]:
    """ruler.png (none without RULER's families)."""
    if not ran(results):
        return []
    return [save_png(ruler_heatmaps(results), directory.path / FIGURE, dpi=110)]
