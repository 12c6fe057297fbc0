"""report.md for a comparison: perplexity tables, the ranking, the seed notes' claims checked
against this run's numbers, and a qualitative comparison with the ALiBi paper.

Everything is computed from the ``results.json`` dict, so a report can be rebuilt at any time
(``write_report``) and a partial comparison gives a partial report.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..eval.inference_scaling import accepts_rope_scaling
from .claims import TOLERANCE, Runs, check_claims, fmt, label_of

#: best-extrapolating first, as in the ALiBi paper (Press et al., 2022), Fig. 1 / Table 2
ALIBI_PAPER_ORDER = ("alibi", "t5", "rope", "sinusoidal")
#: a perplexity ratio above this is called a blow-up in the text
BLOW_UP = 4.0
PAPER_NAMES = {"alibi": "ALiBi", "t5": "T5 bias", "rope": "rotary", "sinusoidal": "sinusoidal"}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _cell(value) -> str:
    if isinstance(value, str):
        return "inf" if value == "inf" else "n/a"
    return fmt(value)


def behaviour(ratio: float | None, note: str | None) -> str:
    """A word for a perplexity ratio ppl(n)/ppl(L)."""
    if note:
        return "cannot run (" + note.removeprefix("n/a (").rstrip(")") + ")"
    if ratio is None:
        return "not measured"
    if ratio <= TOLERANCE:
        return "stays near its training perplexity"
    return "degrades" if ratio <= BLOW_UP else "blows up"


def ppl_section(r: Runs, runs: list[dict]) -> list[str]:
    lengths = r.lengths
    header = ["run"] + [f"{n}{' (L)' if n == r.train_len else ''}" for n in lengths]
    rows, notes = [], {}
    for run in runs:
        label = label_of(run)
        row = [label]
        for n in lengths:
            value = run.get("ppl", {}).get(str(n))
            row.append(_cell(value) if value is not None else "")
            if isinstance(value, str) and value != "inf":
                notes[label] = value
        rows.append(row)
    out = ["## Perplexity against evaluation length", "",
           f"Held-out test split, {_windows_text(r)}; lower is better.", ""]
    out += _table(header, rows)
    for label, note in notes.items():
        out += ["", f"- {label}: {note}"]
    ratio_rows = []
    for run in runs:
        label = label_of(run)
        ratio_rows.append([label] + [fmt(r.ratio(label, n)) for n in lengths])
    out += ["", f"Ratio to the run's own perplexity at L = {r.train_len} (1.00 = no loss from "
            "longer inputs; below 1 = the extra context helps):", ""]
    out += _table(["run"] + [str(n) for n in lengths], ratio_rows)
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
        value = r.ppl(label_of(run), longest)
        return (0, value) if value is not None and math.isfinite(value) else (1, math.inf)

    rows = []
    for rank, run in enumerate(sorted(runs, key=key), 1):
        label = label_of(run)
        ratios = [x for x in (r.ratio(label, n) for n in longer) if x is not None]
        mean_ratio = sum(ratios) / len(ratios) if ratios and len(ratios) == len(longer) \
            else None
        rows.append([str(rank), label, fmt(r.ppl(label, longest)),
                     fmt(r.ratio(label, longest)), fmt(mean_ratio),
                     fmt(r.ppl(label, r.train_len))])
    out = ["## Ranking", "",
           f"By perplexity at the longest length ({longest}); runs that cannot run there come "
           f"last. Mean ratio = mean of ppl(n)/ppl({r.train_len}) over n > {r.train_len}.", ""]
    return out + _table(["rank", "run", f"ppl@{longest}", f"ratio@{longest}", "mean ratio",
                         f"ppl@{r.train_len}"], rows)


def claims_section(results: dict, r: Runs) -> list[str]:
    out = ["## The seed notes' claims, checked on this run", "",
           f"P = {r.probe} (8L if evaluated, else the longest length), L = {r.train_len}; "
           f"\"near\" = within {round((TOLERANCE - 1) * 100)} % of the training-length "
           "perplexity. One small model, one seed: a verdict says what THIS run shows, not "
           "what is true in general.", ""]
    verdicts = check_claims(results)
    out += _table(["#", "claim", "this run"],
                  [[str(i), v.claim, f"**{v.verdict}**"] for i, v in enumerate(verdicts, 1)])
    out.append("")
    for i, v in enumerate(verdicts, 1):
        out += [f"{i}. **{v.claim}** ({v.source}): {v.verdict}.",
                f"   Rule: {v.rule}. Numbers: {v.evidence}."]
    return out


def paper_section(r: Runs) -> list[str]:
    present = [e for e in ALIBI_PAPER_ORDER if r.ppl(e, r.probe) is not None]
    out = ["## Compared with the ALiBi paper", "",
           "Press et al. (2022), Figure 1 and the exact numbers in their appendix Table 2 "
           "(WikiText-103, L = 512): sinusoidal degrades fastest past L, rotary degrades, T5 "
           "bias degrades slowly, ALiBi does not degrade; best-extrapolating first: "
           + " > ".join(PAPER_NAMES[e] for e in ALIBI_PAPER_ORDER) + ".", ""]
    if len(present) < 2:
        return out + ["Not enough of these encodings were evaluated here to compare."]
    ours = sorted(present, key=lambda e: r.ppl(e, r.probe) / r.ppl(e, r.train_len))
    pairs = [(a, b) for i, a in enumerate(present) for b in present[i + 1:]]
    agree = sum(ours.index(a) < ours.index(b) for a, b in pairs)
    out += [f"This run, by ratio ppl({r.probe})/ppl({r.train_len}): "
            + " > ".join(f"{PAPER_NAMES[e]} ({fmt(r.ratio(e, r.probe))})" for e in ours)
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
    rows = []
    for run in runs:
        label = label_of(run)
        rows.append([label] + [fmt(r.entropy_tail(label, n)) for n in lengths])
    uniform = []
    for n in lengths:
        u = next((e[str(n)].get("uniform_tail") for e in
                  (run.get("entropy") or {} for run in runs)
                  if isinstance(e.get(str(n)), dict)), None)
        uniform.append(fmt(u))
    rows.append(["uniform attention"] + uniform)
    return ["## Attention entropy against length", "",
            "Mean entropy (nats) of the attention of the last quarter of query positions "
            "(those that see the most keys), over layers, heads and windows; eager backend.",
            ""] + _table(["run"] + [str(n) for n in lengths], rows)


def training_section(runs: list[dict]) -> list[str]:
    rows = []
    for run in runs:
        if run.get("inference_scaling"):
            continue
        tps = run.get("train_tokens_per_s")
        secs = (run.get("seconds") or {}).get("train")
        rows.append([run["encoding"], str(run.get("steps")),
                     f"{tps:,.0f}" if isinstance(tps, (int, float)) else "n/a",
                     fmt(run.get("final_loss")), f"{secs:.0f}" if secs is not None else "n/a"])
    if not rows:
        return []
    return ["## Training", "", "Same data, steps, batch, seed and model for every encoding.",
            ""] + _table(["encoding", "steps", "tokens/s", "final loss", "seconds"], rows)


def render_report(results: dict, plots: list[str] | None = None) -> str:
    """The markdown text of report.md for a results.json dict."""
    r = Runs(results)
    runs = results.get("runs", [])
    c, corpus = results.get("config", {}), results.get("corpus", {})
    out = ["# Train short, test long: positional encodings compared", "",
           f"Preset `{c.get('preset')}`: encodings {', '.join(c.get('encodings', []))}; "
           f"trained at L = {r.train_len} for {c.get('steps')} steps of {c.get('batch_size')} "
           f"sequences; model d_model={c.get('d_model')}, n_layers={c.get('n_layers')}, "
           f"n_heads={c.get('n_heads')}; tokenizer `{c.get('tokenizer')}`; seed {c.get('seed')}.",
           f"Corpus `{corpus.get('name')}` (Python {corpus.get('python_version')}, sha256 "
           f"{str(corpus.get('sha256', ''))[:16]}...). RoPE inference-time scalings: "
           f"{', '.join(c.get('scalings', [])) or 'none'}."]
    options = {e: o for e, o in (c.get("pe_options") or {}).items()
               if e in c.get("encodings", []) and o}
    if options:
        out.append("Encoding options: " + "; ".join(
            f"{e} " + ", ".join(f"{k}={v}" for k, v in o.items()) for e, o in options.items())
            + " (the rest at their defaults).")
    out.append("")
    expected = sum(1 + (len(c.get("scalings", [])) if accepts_rope_scaling(e) else 0)
                   for e in c.get("encodings", []))
    if len(runs) < expected:
        out += [f"**Partial report: {len(runs)} of {expected} runs finished.**", ""]
    if not runs:
        return "\n".join(out) + "\n"
    out += ppl_section(r, runs) + [""] + ranking_section(r, runs) + [""]
    out += claims_section(results, r) + [""] + paper_section(r) + [""]
    for section in (entropy_section(r, runs), training_section(runs)):
        if section:
            out += section + [""]
    if plots:
        out += ["## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(out)


def write_report(results: dict, out_dir: Path, plots: list[str] | None = None) -> Path:
    """Write ``out_dir/report.md`` atomically and return its path."""
    path = Path(out_dir) / "report.md"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(render_report(results, plots), encoding="utf-8")
    os.replace(tmp, path)
    return path
