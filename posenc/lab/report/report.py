"""report.md and index.html for a comparison: whether each model learned, perplexity tables
(mean ± spread), the ranking with ties, published claims checked against this run's numbers,
a comparison with the ALiBi paper, entropy, and training cost.

Everything is computed from the ``results.json`` dict, so a report can be rebuilt at any time
(``render_report``, ``posenc plot``) and a partial comparison gives a partial report.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from ...eval.inference_scaling import has_attention_weights, run_label
from ...eval.lengths import note_reason
from ...methods import sources_lines
from ...study import markdown_table
from ..claims.claims import PRESS, TOLERANCE, check_claims
from ..claims.evidence import NOT_SUPPORTED, NOT_TESTED, SUPPORTED, Runs, fmt, fmt_est, runs_not_run
from ..claims.handicaps import (
    handicap_lines,
    handicap_preamble,
    handicap_tag,
    shape_handicaps,
    verdict_handicaps,
)
from ..claims.identical import identical_runs_note
from ..claims.papers import ALIBI_PAPER_NAMES, papers_section
from ..claims.stats import BOOTSTRAP_REPLICATES, tie_groups
from ..runs.baseline import LEARNED_FRACTION
from ..runs.variants import takes_scaling
from .header import data_line, settings_line, used_scalings
from .markdown_html import html_page, markdown_to_html

#: best-extrapolating first, as in the ALiBi paper (Press et al., 2022), Fig. 1 / Table 2
ALIBI_PAPER_ORDER = ("alibi", "t5", "rope", "sinusoidal")
#: a perplexity ratio above this is called a blow-up in the text
BLOW_UP = 4.0
#: how a one-seed verdict is marked
PROVISIONAL = "provisional"


def behaviour(ratio: float | None, note: str | None) -> str:
    """A word for a perplexity ratio ppl(n)/ppl(L)."""
    if note:
        return f"cannot run ({note_reason(note)})"
    if ratio is None:
        return "not measured"
    if ratio <= TOLERANCE:
        return "stays near its training perplexity"
    return "degrades" if ratio <= BLOW_UP else "blows up"


def noise_text(results: dict) -> str:
    """How this comparison's spreads were measured, in one sentence."""
    seeds = int(results.get("config", {}).get("seeds", 1))
    if seeds >= 2:
        return (f"± is the standard deviation over {seeds} seeds (each seed sets data order "
                "and initialisation)")
    return ("one seed: ± is the standard deviation of a bootstrap over the evaluation text "
            f"({BOOTSTRAP_REPLICATES} resamples of blocks of the longest length, the same "
            "blocks at every length and for every run, so ratios and differences between "
            "runs are paired: two runs differ when their difference exceeds the spread of "
            "the paired differences), evaluation noise only, not seed-to-seed variation")


def _ppl_cell(r: Runs, label: str, n: int) -> str:
    note = r.note(label, n)
    if note:
        return "n/a"
    return fmt_est(r.ppl_est(label, n)) if r.ppl(label, n) is not None else ""


def learned_section(r: Runs, runs: list[dict]) -> list[str]:
    if r.unigram is None:
        return []
    rows = []
    for run in runs:
        if run.get("inference_scaling"):
            continue
        label = run_label(run)
        ok = r.learned(label)
        ppl = r.ppl(label, r.train_len)
        rows.append([label, _ppl_cell(r, label, r.train_len),
                     fmt(ppl / r.unigram) if ppl is not None else "n/a",
                     "yes" if ok else ("**no**" if ok is False else "n/a")])
    identical = identical_runs_note(r, runs)
    return ["## Did every model learn?", "",
            f"Unigram baseline (token frequencies of the training split, no context): "
            f"perplexity {fmt(r.unigram)} on the same held-out tokens. A run has learned when "
            f"its perplexity at L = {r.train_len} is at most {LEARNED_FRACTION:g} x the "
            "baseline; no claim is decided from a run that has not.", ""] + markdown_table(
        ["encoding", f"ppl@{r.train_len}", "ppl / unigram", "learned"], rows) + (
        [""] + [f"- {x}" for x in identical] if identical else [])


def ppl_section(r: Runs, runs: list[dict], results: dict) -> list[str]:
    lengths = r.lengths
    header = ["run"] + [f"{n}{' (L)' if n == r.train_len else ''}" for n in lengths]
    rows, notes = [], {}
    for run in runs:
        label = run_label(run)
        rows.append([label] + [_ppl_cell(r, label, n) for n in lengths])
        for n in lengths:
            if r.note(label, n):
                notes[label] = r.note(label, n)
    out = ["## Perplexity against evaluation length", "",
           f"Held-out test split, {_windows_text(r)}; lower is better; {noise_text(results)}.",
           ""]
    out += markdown_table(header, rows)
    for label, note in notes.items():
        out += ["", f"- {label}: {note}"]
    ratio_rows = [[run_label(run)] + [fmt_est(r.ratio_est(run_label(run), n)) for n in lengths]
                  for run in runs]
    out += ["", f"Ratio to the run's own perplexity at L = {r.train_len} (1.00 = no loss from "
            "longer inputs; below 1 = the extra context helps):", ""]
    out += markdown_table(["run"] + [str(n) for n in lengths], ratio_rows)
    return out


def _windows_text(r: Runs) -> str:
    c = r.config
    stride = c.get("stride")
    kind = f"sliding windows with stride {stride}" if stride else "non-overlapping windows"
    tokens = c.get("eval_tokens")
    return kind + (f", about {tokens:,} tokens scored per length" if tokens else "")


def ranking_section(r: Runs, runs: list[dict]) -> list[str]:
    longest = max(r.lengths) if r.lengths else 0
    longer = [n for n in r.lengths if n > r.train_len]

    def key(run: dict) -> tuple[int, float]:
        value = r.ppl(run_label(run), longest)
        return (0, value) if value is not None and math.isfinite(value) else (1, math.inf)

    ranked = sorted(runs, key=key)
    measured = [run for run in ranked if key(run)[0] == 0]
    groups = tie_groups([r.ppl_est(run_label(run), longest) for run in measured])
    sizes = {g: groups.count(g) for g in groups}
    rows = []
    for i, run in enumerate(ranked):
        label = run_label(run)
        if i < len(measured):
            group = groups[i]
            first = groups.index(group) + 1
            rank = f"{first}=" if sizes[group] > 1 else str(first)
        else:
            rank = "-"
        ratios = [x for x in (r.ratio(label, n) for n in longer) if x is not None]
        mean_ratio = sum(ratios) / len(ratios) if ratios and len(ratios) == len(longer) \
            else None
        rows.append([rank, label, _ppl_cell(r, label, longest),
                     fmt_est(r.ratio_est(label, longest)), fmt(mean_ratio),
                     _ppl_cell(r, label, r.train_len)
                     + ("" if r.learned(label) is not False else " (not learned)")])
    out = ["## Ranking", "",
           f"By perplexity at the longest length ({longest}); runs that cannot run there come "
           f"last. A rank with `=` is shared by runs that do not differ from each other "
           f"beyond noise at {longest} (every pair of the group is within noise: ties do not "
           "chain); a new rank starts at the first run that differs from some run of the "
           "group, so it may still be within noise of the group's last run. Mean ratio = mean of "
           f"ppl(n)/ppl({r.train_len}) over n > {r.train_len}.", ""]
    return out + markdown_table(["rank", "run", f"ppl@{longest}", f"ratio@{longest}",
                                 "mean ratio", f"ppl@{r.train_len}"], rows)


def claims_section(results: dict, r: Runs) -> list[str]:
    out = ["## Published claims, checked on this run", "",
           f"P = {r.probe} (8L if evaluated, else the longest length), L = {r.train_len}; "
           f"\"near\" = within {round((TOLERANCE - 1) * 100)} % of the training-length "
           "perplexity. A claim is decided (supported / not supported) only when the numbers "
           "differ beyond noise, else it is inconclusive. With seeds: their mean ± spread "
           f"intervals do not overlap. Here {noise_text(results)}. Speed claims use "
           "interleaved step timing. Small "
           "models: a verdict says what THIS comparison shows, not what is true in general.",
           ""]
    checked, verdicts, needs = check_claims(results), [], []
    for v in checked:
        missing = runs_not_run(r, v.evidence) if v.verdict == NOT_TESTED else []
        needs += [m for m in missing if m not in needs]
        if not missing:
            verdicts.append(v)
    untested = len(checked) - len(verdicts)
    if untested:
        out += [f"**Not tested:** {untested} claim{'s' if untested > 1 else ''} need "
                f"encodings this comparison did not run: {', '.join(needs)}.", ""]
    one_seed = int(results.get("config", {}).get("seeds", 1)) < 2
    if one_seed:
        out += [f"**One seed: every decided verdict is {PROVISIONAL}.** It rests on "
                "evaluation noise only (the paired spread printed beside it), not on "
                "seed-to-seed variation, which can be larger: run more seeds (`--seeds 3`, "
                "preset `seeds3`) before trusting it.", ""]
    handicaps = shape_handicaps(results.get("config") or {})
    touched = [verdict_handicaps(v.rule, handicaps) for v in verdicts]
    out += handicap_preamble(handicaps)
    out += markdown_table(["#", "claim", "source", "this run"],
                  [[str(i), v.claim, v.source, verdict_text(v.verdict, one_seed)
                    + handicap_tag(names)]
                   for i, (v, names) in enumerate(zip(verdicts, touched), 1)])
    out.append("")
    for i, (v, names) in enumerate(zip(verdicts, touched), 1):
        out += [f"{i}. **{v.claim}** ({v.source}): {verdict_text(v.verdict, one_seed)}.",
                f"   Rule: {v.rule}. Numbers: {v.evidence}."]
        out += handicap_lines(names, handicaps)
    return out


def verdict_text(verdict: str, one_seed: bool) -> str:
    """``**supported**``, with `` (provisional: one seed)`` for a decided one-seed verdict."""
    decided = verdict in (SUPPORTED, NOT_SUPPORTED)
    return f"**{verdict}**" + (f" ({PROVISIONAL}: one seed)" if one_seed and decided else "")


def paper_section(r: Runs) -> list[str]:
    present = [e for e in ALIBI_PAPER_ORDER if r.ppl(e, r.probe) is not None]
    out = ["## Compared with the ALiBi paper", "",
           f"{PRESS}, Figure 1 and the exact numbers in their appendix Table 2 "
           "(WikiText-103, L = 512): sinusoidal degrades fastest past L, rotary degrades, T5 "
           "bias degrades slowly, ALiBi does not degrade; best-extrapolating first: "
           + " > ".join(ALIBI_PAPER_NAMES[e] for e in ALIBI_PAPER_ORDER) + ".", ""]
    if len(present) < 2:
        return out + ["Not enough of these encodings were evaluated here to compare."]
    ours = sorted(present, key=lambda e: r.ppl(e, r.probe) / r.ppl(e, r.train_len))
    pairs = [(a, b) for i, a in enumerate(present) for b in present[i + 1:]]
    agree = sum(ours.index(a) < ours.index(b) for a, b in pairs)
    out += [f"This run, by ratio ppl({r.probe})/ppl({r.train_len}): "
            + " > ".join(f"{ALIBI_PAPER_NAMES[e]} ({fmt_est(r.ratio_est(e, r.probe))})"
                         for e in ours)
            + f". {agree} of {len(pairs)} pairs are ordered as in the paper"
            + (" (the same ordering)." if agree == len(pairs) else "."), ""]
    for name in ("alibi", "t5", "rope", "sinusoidal", "learned", "nope"):
        if r.get(name) is not None:
            ratio = r.ratio(name, r.probe)
            out.append(f"- {name} at {r.probe}: {behaviour(ratio, r.note(name, r.probe))}"
                       + (f" (ratio {fmt(ratio)})" if ratio is not None else ""))
    return out


def entropy_section(r: Runs, runs: list[dict]) -> list[str]:
    lengths = sorted({int(n) for run in runs for n in (run.get("entropy") or {})})
    if not lengths:
        return []
    weighted = [run for run in runs if has_attention_weights(run.get("inference_scaling"))]
    left_out = [run_label(run) for run in runs if run not in weighted]
    rows = [[run_label(run)] + [fmt_est(r.entropy_est(run_label(run), n)) for n in lengths]
            for run in weighted]
    uniform = []
    for n in lengths:
        u = next((e[str(n)].get("uniform_tail") for e in
                  (run.get("entropy") or {} for run in runs)
                  if isinstance(e.get(str(n)), dict)), None)
        uniform.append(fmt(u))
    rows.append(["uniform attention"] + uniform)
    return ["## Attention entropy against length", "",
            "Mean entropy (nats) of the attention of the last quarter of query positions "
            "(those that see the most keys), over layers, heads and windows; eager backend; "
            "± over seeds; with one seed, a bootstrap over blocks of tail queries of the "
            "evaluation windows (the same windows for every run, so runs are compared by "
            "paired differences; evaluation noise only)."
            + (f" Not measured: {', '.join(left_out)} (a region method's patched attention "
               "returns no weights)." if left_out else ""),
            ""] + markdown_table(["run"] + [str(n) for n in lengths], rows)


def training_section(r: Runs, runs: list[dict]) -> list[str]:
    timing = r.results.get("timing") or {}
    rows = []
    for run in runs:
        if run.get("inference_scaling"):
            continue
        secs = [(s.get("seconds") or {}).get("train") for s in run.get("seeds") or [run]]
        secs = [s for s in secs if isinstance(s, (int, float))]
        step = (timing.get("step_seconds") or {}).get(run["encoding"])
        rel = r.step_time(run["encoding"])
        rows.append([run["encoding"], str(run.get("steps")), fmt(run.get("final_loss")),
                     f"{sum(secs) / len(secs):.0f}" if secs else "n/a",
                     f"{1000 * sorted(step)[len(step) // 2]:.0f}" if step else "n/a",
                     fmt_est(rel)])
    if not rows:
        return []
    return ["## Training and cost", "",
            "Same data, steps, batch and model for every encoding. Seconds: one training run "
            "(mean over seeds; wall time, so it includes whatever else the machine did). Step "
            f"ms: median of {timing.get('rounds', 0)} interleaved timing rounds of one "
            "training step (forward, backward, AdamW); relative: step time / the round's "
            "median over encodings, mean ± spread over rounds.", ""] + markdown_table(
        ["encoding", "steps", "final loss", "train seconds", "step ms", "relative step time"],
        rows)


def failed_section(results: dict) -> list[str]:
    """Runs whose training diverged (they are retried by the next call)."""
    failed = results.get("failed") or {}
    if not failed:
        return []
    return (["## Runs that failed", "",
             "These runs stopped with a non-finite loss or gradient and are left out of every "
             "table; running the same command again retries them.", ""]
            + [f"- `{name}`: {message}" for name, message in sorted(failed.items())] + [""])


def execution_note(results: dict) -> list[str]:
    """A note when the runs of a grown comparison were computed with different worker and
    thread counts (results.json ``execution``): their sums differ in the last bits."""
    seen = sorted({(int(e.get("workers", 1)), int(e.get("threads", 1)))
                   for e in (results.get("execution") or {}).values() if isinstance(e, dict)})
    if len(seen) < 2:
        return []
    ways = ", ".join(f"{w} worker{'s' * (w > 1)} x {t} thread{'s' * (t > 1)}" for w, t in seen)
    note = (f"**Note:** the runs were computed in different ways ({ways}); floating-point "
            "sums split differently differ at about 1e-7, so runs compare exactly only "
            "within one way (see `execution` in results.json).")
    return [note, ""]


def render_report(results: dict, plots: list[str] | None = None,
                  links: tuple[tuple[str, str], ...] = (),
                  changed: list[str] | None = None) -> str:
    """The markdown text of report.md for a results.json dict; ``links`` (title, relative
    href) name other pages of the comparison, e.g. its atlas; ``changed``: the settings that
    differ from the preset (named in the header)."""
    r = Runs(results)
    runs = results.get("runs", [])
    c = results.get("config", {})
    seeds = int(c.get("seeds", 1))
    out = ["# Train short, test long: positional encodings compared", "",
           settings_line(results, r.train_len, changed), data_line(results)]
    cited = sources_lines(used_scalings(c))
    if cited:
        out += ["", "Sources of the inference-time methods:", *cited, ""]
    options = {r["encoding"]: {k: v for k, v in (r.get("options") or {}).items()
                               if k != "vocab_size"}           # the tokenizer's, not a choice
               for r in runs if not r.get("inference_scaling")}
    options = {e: o for e, o in options.items() if o}
    if options:
        out.append("Encoding options: " + "; ".join(
            f"{e} " + ", ".join(f"{k}={v}" for k, v in o.items()) for e, o in options.items())
            + " (the rest at their defaults).")
    out += [""] + [f"See also: [{title}]({href})." for title, href in links]
    if links:
        out.append("")
    expected = seeds * sum(1 + sum(takes_scaling(e, s) for s in c.get("scalings", []))
                           for e in c.get("encodings", []))
    finished = sum(len(run.get("seeds") or [run]) for run in runs)
    if finished < expected:
        out += [f"**Partial report: {finished} of {expected} runs finished.**", ""]
    out += failed_section(results) + execution_note(results)
    if not runs:
        return "\n".join(out) + "\n"
    out += learned_section(r, runs) + [""]
    out += ppl_section(r, runs, results) + [""] + ranking_section(r, runs) + [""]
    out += claims_section(results, r) + [""] + paper_section(r) + [""]
    out += papers_section({"this run": r}) + [""]
    for section in (entropy_section(r, runs), training_section(r, runs)):
        if section:
            out += section + [""]
    if plots:
        out += ["## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(out)


#: other pages of a comparison directory linked from report.md and index.html: (title,
#: relative href), shown only when the target exists
INDEX_LINKS: tuple[tuple[str, str], ...] = (
    ("Atlas: pictures of what each encoding does", "atlas/index.html"),)


def existing_links(out_dir: Path) -> tuple[tuple[str, str], ...]:
    """The ``INDEX_LINKS`` whose target exists in ``out_dir``."""
    return tuple((t, h) for t, h in INDEX_LINKS if (Path(out_dir) / h).exists())


def render_index(results: dict, plots: list[str], links: tuple[tuple[str, str], ...] = (),
                 report: str | None = None) -> str:
    """A self-contained index.html: links to results.json, report.md and ``links`` (title,
    relative href; e.g. an atlas), then the whole report (tables, verdicts, each figure with
    its caption) rendered as HTML (:mod:`posenc.lab.report.markdown_html`). ``report``: the
    markdown :func:`render_report` gave for the same arguments, if the caller has it."""
    from ...viz.plots import CAPTIONS
    esc = html.escape
    items = ['<li><a href="report.md">report.md</a>: this report as markdown</li>',
             '<li><a href="results.json">results.json</a>: every number</li>']
    items += [f'<li><a href="{esc(href)}">{esc(title)}</a></li>' for title, href in links]
    if report is None:
        report = render_report(results, plots, links)
    body = markdown_to_html(report, CAPTIONS)
    return html_page("posenc compare", "\n".join(["<ul>", *items, "</ul>", body]))
