"""The arena's numbers with their noise, its verdicts and its report (report.md, needle.png,
passkey.png; RULER's part, ruler.png, is :mod:`posenc.hf.ruler.report`), all drawn from
results.json (:mod:`posenc.hf.arena`).

Noise: retrieval accuracy is resampled over needles (each needle is one fact in its own
stretch of text, so this also resamples the documents) or passkeys, perplexity over its
windows (distinct stretches of the text); :data:`REPLICATES` bootstrap resamples drawn with a
fixed seed (Efron & Tibshirani 1993), the spread is their standard deviation. An accuracy's
spread is at least the binomial standard error of its rate over all its trials, the rate
smoothed as (k + 1) / (n + 2) (as the lab's task verdicts do), so one needle per cell or a
perfect score never claims zero noise. A method beats
'none' on a task beyond noise when the intervals mean ± spread of the two do not overlap;
overlapping intervals are inconclusive (the lab's rule, :mod:`posenc.lab.claims.stats`).
A verdict abstains ("too few samples", :func:`posenc.study.too_few_samples`) when either
method rests on fewer than :data:`~posenc.study.MIN_SAMPLES` perplexity windows at a length,
or needles (keys) over the cells beyond the original.

Only tasks the unextended model solves at the original length count toward verdicts: a
retrieval task counts when 'none' finds at least :data:`SOLVED_AT` of the needles (keys) at
the longest length within the original context; perplexity counts whenever 'none' has a
finite perplexity there (a language model is scored on its own text).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..methods import spec_citation
from ..study import (
    MIN_SAMPLES,
    RunDirectory,
    Verdict,
    markdown_table,
    too_few_samples,
)
from ..viz.axes import save_png
from ..viz.heatmaps import accuracy_heatmaps
from .arena_estimates import (
    REPLICATES,
    SOLVED_AT,
    against_none,
    draws,
    hit_estimate,
)
from .load import model_title

TASKS = {"needle": "needle in a haystack", "passkey": "passkey retrieval",
         "ppl": "perplexity"}


# ------------------------------------------------------------------ estimates
def nll_estimate(points: dict[str, dict], lengths: list[int]) -> tuple[float, float] | None:
    """(mean NLL over ``lengths``, bootstrap spread) resampling each length's windows."""
    if not lengths or any(str(n) not in points for n in lengths):
        return None
    means, reps = [], []
    for n in lengths:
        p = points[str(n)]
        nll = np.asarray(p["window_nll"], dtype=float)
        tok = np.asarray(p["window_tokens"], dtype=float)
        means.append(float((nll * tok).sum() / tok.sum()))
        if len(nll) >= 2:
            pick = draws(len(nll))
            reps.append((nll[pick] * tok[pick]).sum(1) / tok[pick].sum(1))
        else:
            reps.append(np.full(REPLICATES, means[-1]))
    total = np.mean(reps, axis=0)
    spread = float(total.std(ddof=1)) if np.all(np.isfinite(total)) else math.inf
    return float(np.mean(means)), spread


def _cells(results: dict, lengths: list[int]) -> list[str]:
    depths = range(len(results["setting"]["depths"]))
    return [f"{n}:{i}" for n in lengths for i in depths]


def _estimate(results: dict, task: str, method: str, lengths: list[int]):
    if task == "ppl":
        return nll_estimate(results["ppl"].get(method, {}), lengths)
    return hit_estimate(results[task].get(method, {}), _cells(results, lengths))


def sample_count(results: dict, task: str, method: str, lengths: list[int]) -> tuple[int, str]:
    """(count, unit) of the independent samples ``method``'s estimate over ``lengths`` rests
    on: the fewest perplexity windows at any one length (each length is resampled on its
    own), or the needles (keys) over all the cells."""
    if task == "ppl":
        points = results["ppl"].get(method, {})
        count = min((len(points.get(str(n), {}).get("window_nll") or ()) for n in lengths),
                    default=0)
        return count, "perplexity window per length" if count == 1 else \
            "perplexity windows per length"
    cells = results[task].get(method, {})
    count = sum(len(cells.get(k) or ()) for k in _cells(results, lengths))
    unit = "needle" if task == "needle" else "passkey"
    return count, f"{unit}{'' if count == 1 else 's'} over the cells"


def sample_notes(setting: dict) -> list[str]:
    """What the report says when a setting leaves too few samples for a verdict."""
    notes = []
    if 0 < setting["windows"] < MIN_SAMPLES:
        notes.append(f"{setting['windows']} perplexity window(s) per length: perplexity "
                     f"verdicts abstain (too few samples; use {MIN_SAMPLES} or more windows "
                     "for a ± that means something)")
    for key, unit in (("needles", "needle"), ("passkey_trials", "passkey")):
        if setting[key] == 1:
            notes.append(f"one {unit} per cell: each heat-map cell is 0 % or 100 %; a {unit} "
                         "verdict pools the cells beyond the original and abstains below "
                         f"{MIN_SAMPLES} {unit}s in all")
    return notes


def _measured(results: dict, task: str) -> bool:
    setting = results["setting"]
    return {"needle": True, "passkey": setting["passkey_trials"] > 0,
            "ppl": setting["windows"] > 0}[task]


# ------------------------------------------------------------------ verdicts
def counted_tasks(results: dict) -> dict[str, tuple[bool, str]]:
    """task -> (whether it counts toward verdicts, why), judged on 'none' at the original
    length (module docstring)."""
    original = results["original"]
    base = [n for n in results["lengths"] if n <= original]
    out = {}
    for task in TASKS:
        if not _measured(results, task):
            out[task] = (False, "not measured")
        elif "none" not in results["methods"]:
            out[task] = (False, "'none' was not run, so nothing shows the task is solvable")
        elif not base:
            out[task] = (False, f"no length within the original context ({original})")
        else:
            est = _estimate(results, task, "none", [max(base)])
            if est is None:
                out[task] = (False, "not measured yet")
            elif task == "ppl":
                ok = math.isfinite(est[0])
                out[task] = (ok, f"'none' perplexity at {max(base)}: {_ppl(est[0])}")
            else:
                ok = est[0] >= SOLVED_AT
                out[task] = (ok, f"'none' accuracy at {max(base)}: {est[0]:.2f} "
                                 f"({'>=' if ok else '<'} {SOLVED_AT})")
    return out


def verdicts(results: dict) -> list[Verdict]:
    """One verdict per extended method and task (RULER's families after the arena's own):
    does it beat 'none' beyond the original?"""
    from .ruler.report import ruler_verdicts  # it builds on this module

    return _own_verdicts(results) + ruler_verdicts(results)


def _own_verdicts(results: dict) -> list[Verdict]:
    original = results["original"]
    beyond = [n for n in results["lengths"] if n > original]
    counted = counted_tasks(results)
    out = []
    for method in results["methods"]:
        if method == "none":
            continue
        for task, label in TASKS.items():
            claim = f"{method} beats no extension on {label} beyond {original} tokens"
            source = spec_citation(method)
            a = _estimate(results, task, method, beyond)
            b = _estimate(results, task, "none", beyond)
            out.append(against_none(
                claim, source, RULE, counted[task],
                None if beyond else f"no length beyond {original}", a, b,
                lambda: too_few_samples(*min(sample_count(results, task, m, beyond)
                                             for m in (method, "none"))),
                lambda spreads: _evidence(task, method, a, b, beyond, spreads=spreads),
                lower_better=task == "ppl"))
    return out


RULE = ("mean ± spread (bootstrap std; for accuracies at least the binomial standard error) "
        "over the lengths beyond the original; overlapping intervals are inconclusive; "
        f"fewer than {MIN_SAMPLES} windows per length, or needles (keys) over the cells, "
        "abstain: too few samples")


def _evidence(task: str, method: str, a, b, lengths: list[int], spreads: bool = True) -> str:
    """The numbers a verdict rests on; ``spreads`` False (too few samples): the means alone,
    as a spread from so few samples would claim a noise that was not measured."""
    at = ", ".join(str(n) for n in lengths)
    pm = (lambda e, f: f"{e[0]:{f}} ± {e[1]:{f}}") if spreads else (lambda e, f: f"{e[0]:{f}}")
    if task == "ppl":
        return (f"perplexity {_ppl(a[0])} ({method}) vs {_ppl(b[0])} (none) at {at}; "
                f"mean NLL {pm(a, '.3f')} vs {pm(b, '.3f')}")
    return f"accuracy {pm(a, '.2f')} ({method}) vs {pm(b, '.2f')} (none) at {at}"


# ------------------------------------------------------------------ report
def _ppl(nll: float) -> str:
    return f"{math.exp(nll):.2f}" if math.isfinite(nll) and nll < 700 else "inf"


def _length_head(results: dict) -> list[str]:
    o = results["original"]
    return [f"{n} ({n / o:g}x)" for n in results["lengths"]]


def _table(results: dict, task: str) -> list[str]:
    rows = []
    for method in results["methods"]:
        cells = []
        for n in results["lengths"]:
            est = _estimate(results, task, method, [n])
            if est is None:
                cells.append("…")
            elif task == "ppl":
                p = results["ppl"][method][str(n)]
                std = p.get("ppl_std")
                shown = std is not None and math.isfinite(std) and p.get("n_windows", 2) > 1
                cells.append(_ppl(est[0]) + (f" ± {std:.2f}" if shown else ""))
            else:
                cells.append(f"{est[0]:.2f} ± {est[1]:.2f}")
        rows.append([method] + cells)
    return markdown_table(["method"] + _length_head(results), rows)


def report_markdown(results: dict[str, Any]) -> str:
    s = results["setting"]
    o, native = results["original"], results["native_context"]
    text = results["text"]
    depths = ", ".join(f"{d:g}" for d in s["depths"])
    lines = [f"# Extension arena: {model_title(results['model'])}", "",
             f"- model: {model_title(results['model'])}, trained context {native} tokens",
             f"- methods extend from an original context of {o} tokens by a factor of "
             f"{s['factor']:g}: {', '.join(results['methods'])}",
             f"- lengths: {', '.join(_length_head(results))}; depths {depths}",
             f"- text: {text['name']} ({text['documents']} documents, {text['chars']} "
             f"characters, {results['n_tokens']} tokens)",
             f"- {s['needles']} needles and {s['passkey_trials']} passkeys per cell, "
             f"{s['windows']} perplexity windows per length; seed {s['seed']}", ""]
    lines += [f"> **Note:** {note}" for note in results.get("notes") or []]
    lines += ["", "## What counts toward verdicts", "",
              f"A task counts when the unextended model solves it at the original length "
              f"(retrieval accuracy or RULER score >= {SOLVED_AT}; perplexity whenever finite).", ""]
    from .ruler import FAMILIES
    from .ruler.report import counted_families, ruler_section

    for task, (ok, why) in counted_tasks(results).items():
        lines.append(f"- {TASKS[task]}: {'counts' if ok else 'does not count'} ({why})")
    for family, (ok, why) in counted_families(results).items():
        lines.append(f"- RULER {FAMILIES[family].title}: "
                     f"{'counts' if ok else 'does not count'} ({why})")
    lines += ["", "## Needle in a haystack", "",
              f"Accuracy over depths {depths} and {s['needles']} needles, ± the bootstrap "
              "std over needles (each in its own stretch of text), at least the binomial "
              "standard error of the rate.", "",
              "![needle in a haystack](needle.png)", ""] + _table(results, "needle")
    if s["passkey_trials"]:
        lines += ["", "## Passkey retrieval", "", "Accuracy over depths, ± the bootstrap std "
                  "over keys, at least the binomial standard error (heat map: passkey.png).",
                  ""] + _table(results, "passkey")
    if s["windows"]:
        lines += ["", "## Perplexity", "", "Sliding windows (stride length/2) over the text, "
                  "± the bootstrap std over windows.", ""] + _table(results, "ppl")
    lines += ruler_section(results)
    found = verdicts(results)
    lines += ["", "## Verdicts", "", f"Rule: {RULE}.", ""]
    lines += markdown_table(["claim", "verdict", "evidence", "source"],
                            [[v.claim, v.verdict, v.evidence, v.source or "-"] for v in found])
    peaks = results.get("peak_rss_bytes") or {}
    if peaks:
        lines += ["", "## Memory", "", "Peak resident memory of the process while measuring "
                  "each method (GiB):", ""]
        lines += markdown_table(["method", "peak RSS"],
                                [[m, f"{b / 2**30:.2f}"] for m, b in peaks.items()])
    return "\n".join(lines) + "\n"


def accuracy_grid(results: dict, task: str, method: str) -> list[list[float]]:
    """[depth][length] accuracy of ``method`` (NaN where not measured)."""
    cells = results[task].get(method, {})
    return [[float(np.mean(cells[f"{n}:{i}"])) if f"{n}:{i}" in cells else math.nan
             for n in results["lengths"]] for i in range(len(results["setting"]["depths"]))]


def write_figures(results: dict, directory: RunDirectory) -> list[Path]:
    """needle.png and (with passkeys) passkey.png: one panel per method; ruler.png (with
    RULER's families): one panel per family."""
    from .ruler.report import ruler_figure

    paths = ruler_figure(results, directory)
    tasks = ["needle"] + (["passkey"] if results["setting"]["passkey_trials"] else [])
    for task in tasks:
        grids = {m: accuracy_grid(results, task, m) for m in results["methods"]}
        fig = accuracy_heatmaps(grids, results["lengths"], results["setting"]["depths"],
                                f"{TASKS[task]}: {Path(results['model']).name}, extended "
                                f"from {results['original']} tokens (outlined: the original "
                                "context)",
                                results["original"],
                                "needle depth" if task == "needle" else "key depth",
                                per_cell=results["setting"]["needles" if task == "needle"
                                                            else "passkey_trials"],
                                trial="needle" if task == "needle" else "key")
        paths.append(save_png(fig, directory.path / f"{task}.png", dpi=110))
    return paths
