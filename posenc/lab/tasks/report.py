"""report.md of a task study: exact match against length (mean ± spread over seeds),
rankings with ties, and the published ordering checked with verdicts that respect noise."""

from __future__ import annotations

from ...study import markdown_table
from .verdicts import (
    COPE_SOURCE,
    COPE_TASK,
    LEARNED_AT,
    MIN_EFFECT,
    PAPER,
    length_score,
    paper_verdicts,
    ranking,
    runs_of,
    score,
)

PART_TITLES = {"lm": "Decoder-only models", "seq2seq": "Encoder-decoder models"}


def studied(results: dict) -> list[tuple[str, str, list[str]]]:
    """(part, task, encodings in config order) for every part and task with runs."""
    cfg, out = results["config"], []
    for task in cfg["lm_tasks"]:
        out.append(("lm", task, cfg["encodings"]))
    if cfg.get("seq2seq_task"):
        out.append(("seq2seq", cfg["seq2seq_task"], cfg["seq2seq_encodings"]))
    return [(p, t, [e for e in encs if runs_of(results, p, t, e)]) for p, t, encs in out
            if any(runs_of(results, p, t, e) for e in encs)]


def lengths_of(results: dict, part: str, task: str, encodings: list[str]) -> list[int]:
    return sorted({int(n) for e in encodings for r in runs_of(results, part, task, e)
                   for n in r["lengths"]})


def summarize(results: dict) -> dict:
    """{part: {task: {encoding: {"seeds": [...], "exact_match": {length: Score dict},
    "token_accuracy": {...}}}}} over the seeds present."""
    out: dict = {}
    for part, task, encodings in studied(results):
        for enc in encodings:
            runs = runs_of(results, part, task, enc)
            entry = {"seeds": [r["seed"] for r in runs], "exact_match": {},
                     "token_accuracy": {}}
            for n in lengths_of(results, part, task, [enc]):
                cells = [r["lengths"].get(str(n)) for r in runs]
                for key in ("exact_match", "token_accuracy"):
                    values = [c[key] if c else None for c in cells]
                    if values and None not in values:
                        entry[key][str(n)] = score(values, cells[0]["n_examples"]).to_dict()
            out.setdefault(part, {}).setdefault(task, {})[enc] = entry
    return out


def accuracy_table(results: dict, part: str, task: str, encodings: list[str],
                   metric: str = "exact_match") -> list[str]:
    lengths = lengths_of(results, part, task, encodings)
    base = runs_of(results, part, task, encodings[0])[0]["train_len"]
    header = ["encoding", "seeds"] + [f"{n}" + (" (L)" if n == base else f" ({n / base:g}L)")
                                      for n in lengths] + ["final loss"]
    rows = []
    for enc in encodings:
        runs = runs_of(results, part, task, enc)
        cells = []
        for n in lengths:
            s = length_score(results, part, task, enc, n, metric)
            note = runs[0]["lengths"].get(str(n), {}).get("note")
            cells.append(s.text() if s is not None else (note or "–"))
        loss = sum(r["final_loss"] for r in runs) / len(runs)
        rows.append([enc, str(len(runs))] + cells + [f"{loss:.3f}"])
    return markdown_table(header, rows) + [""]


def shifted_table(results: dict, task: str, encodings: list[str], metric: str) -> list[str]:
    """``metric`` of the decoder-only models of ``task`` on its out-of-distribution test
    (the runs' ``out_of_distribution``), mean ± spread per length; [] when no run has one."""
    runs = {e: [r for r in runs_of(results, "lm", task, e) if "out_of_distribution" in r]
            for e in encodings}
    runs = {e: rs for e, rs in runs.items() if rs}
    if not runs:
        return []
    lengths = sorted({int(n) for rs in runs.values() for r in rs
                      for n in r["out_of_distribution"]["lengths"]})
    base = next(iter(runs.values()))[0]["train_len"]
    header = ["encoding", "seeds"] + [f"{n}" + (" (L)" if n == base else f" ({n / base:g}L)")
                                      for n in lengths]
    rows = []
    for enc, rs in runs.items():
        cells = []
        for n in lengths:
            found = [r["out_of_distribution"]["lengths"].get(str(n)) for r in rs]
            values = [c.get(metric) if c else None for c in found]
            cells.append("–" if None in values else
                         score(values, found[0]["n_examples"]).text())
        rows.append([enc, str(len(rs))] + cells)
    return markdown_table(header, rows) + [""]


def ranking_lines(results: dict, part: str, task: str, encodings: list[str],
                  metric: str = "exact_match") -> list[str]:
    rows = ranking(results, part, task, encodings, metric)
    what = "exact match" if metric == "exact_match" else "token accuracy"
    lines, place = [], 0
    for i, row in enumerate(rows):
        if row.note is not None:
            lines.append(f"- unranked: **{row.encoding}**, {row.note}")
            continue
        if not row.tied:
            place = i + 1
        tie = " (tied with the row above: within noise)" if row.tied else ""
        lines.append(f"- rank {place}: **{row.encoding}**, {row.score.text()} {what} past L "
                     f"(exact match at L {row.in_length.text()}){tie}")
    return lines + [""]


def compact_ranking(results: dict, part: str, task: str, encodings: list[str],
                    metric: str = "exact_match") -> str:
    """``"t5 > rope = alibi; not learned: nope"`` (``=``: within noise)."""
    rows = ranking(results, part, task, encodings, metric)
    ranked = [r for r in rows if r.note is None]
    text = "".join((" = " if r.tied else " > ") * (i > 0) + r.encoding
                   for i, r in enumerate(ranked)) or "none"
    weak = [r.encoding for r in rows if r.note is not None]
    return text + (f"; did not learn at L: {', '.join(weak)}" if weak else "")


def verdict_lines(results: dict) -> list[str]:
    exact, tokens = (paper_verdicts(results, m) for m in ("exact_match", "token_accuracy"))
    if not exact:
        return ["No pair of encodings that the paper orders was trained here.", ""]
    rows = [[e.claim, f"**{e.verdict}**", e.evidence, t.verdict, t.evidence,
             e.source.partition(",")[0]] for e, t in zip(exact, tokens)]
    return markdown_table(["claim", "verdict (exact match)", "evidence (mean ± spread)",
                           "token accuracy", "evidence", "source"], rows) + [""]


#: (task, encoding) pairs an encoder-decoder cannot learn by construction, and why
STRUCTURAL_FAILURES = {
    ("reverse", "alibi"):
        "structurally unlearnable: the encoder's bidirectional ALiBi bias -m|i - j| is "
        "mirror-symmetric and the encoder has no other position signal, so the encoder "
        "states of a source reversed are its states in reverse order; cross-attention "
        "carries no positions, so the decoder sees the same set of states for a source and "
        "its reverse and must give both the same output: it cannot tell a sequence from its "
        "reverse, whatever it learns",
    ("reverse", "nope"):
        "structurally unlearnable: without positions the encoder is permutation-equivariant "
        "and cross-attention carries no positions, so the decoder sees the same set of "
        "states for every order of the source",
}


def structural_lines(part: str, task: str, encodings: list[str]) -> list[str]:
    """A line per encoder-decoder encoding that cannot learn ``task`` by construction
    (:data:`STRUCTURAL_FAILURES`): a failure that is not 'did not learn'."""
    if part == "lm":
        return []
    lines = [f"- **{enc}** on {task}: {STRUCTURAL_FAILURES[(task, enc)]}."
             for enc in encodings if (task, enc) in STRUCTURAL_FAILURES]
    return ["Failures by construction, not for lack of training:", ""] + lines + [""] \
        if lines else []


def render_report(results: dict, plots: list[str] | None = None) -> str:
    cfg = results["config"]
    model, lm, s2s = cfg["model"], cfg["train"], cfg["seq2seq_train"]
    n_seeds = len(cfg["seeds"])
    spread = ("the sample standard deviation across seeds or, when larger, the binomial "
              "standard error of the mean over all seeds' test examples (the rate smoothed "
              "as (k + 1) / (n + 2), so a run of zeros still has the resolution of its "
              "examples)" if n_seeds >= 2 else
              "the binomial standard error over the test examples, the rate smoothed as "
              "(k + 1) / (n + 2) (one seed: evaluation noise only, not training noise)")
    lines = [
        "# Length generalisation on synthetic tasks", "",
        f"Preset `{cfg['preset']}`, seeds {', '.join(map(str, cfg['seeds']))} (each seed sets "
        "the initialisation and the data order). Every model learns on inputs up to length L "
        "and is tested on longer ones; a cell is the exact-match rate (every answer token "
        f"right) on {cfg['eval_examples']} test examples, as mean ± spread, where the "
        f"spread is {spread}. Two encodings differ only when their means are further apart "
        f"than the sum of their spreads and than {MIN_EFFECT:g}; otherwise the comparison "
        "is *inconclusive*. "
        f"An encoding whose exact match at L is below {LEARNED_AT:g} did not learn the task "
        "and gets no verdict.", "",
        f"Decoder-only: d_model {model['d_model']}, {model['n_layers']} layers, "
        f"{model['n_heads']} heads, {lm['steps']} steps of {lm['batch_size']} examples at lr "
        f"{lm['lr']:g}, lengths drawn uniformly up to L = "
        f"{lm['max_len']}; the loss and the score cover the answer tokens only.", ""]
    if cfg.get("seq2seq_task"):
        lines += [
            f"Encoder-decoder: {cfg['seq2seq_layers']} encoder and {cfg['seq2seq_layers']} "
            f"decoder layers of width {model['d_model']}, the same encoding in both "
            "(bidirectional in the encoder where it has that option; cross-attention has "
            f"none), {s2s['steps']} teacher-forced steps on sources of "
            f"{s2s['min_len']}..{s2s['max_len']} letters; tested by greedy "
            "decoding, exact match of the whole output (answer and end token).", ""]
    if "seconds" in results:
        cpu = sum(r["seconds"].get("cpu", 0.0) for r in results["runs"])
        lines += [f"Wall time of the runs: {results['seconds']:.0f} s, CPU time {cpu:.0f} s "
                  "(each run trained and evaluated on one thread, summed over every call "
                  "that grew this study; runs side by side in worker processes make the "
                  "wall time shorter than the CPU time, a busy machine longer).", ""]
    for part, task, encodings in studied(results):
        lines += [f"## {PART_TITLES[part]}: {task}", ""]
        lines += accuracy_table(results, part, task, encodings)
        lines += ["Ranking by mean exact match past L:", ""]
        lines += ranking_lines(results, part, task, encodings)
        lines += ["Token accuracy (share of answer tokens right), mean ± spread:", ""]
        lines += accuracy_table(results, part, task, encodings, "token_accuracy")
        lines += ["Ranking by mean token accuracy past L:", ""]
        lines += ranking_lines(results, part, task, encodings, "token_accuracy")
        lines += structural_lines(part, task, encodings)
        if part == "lm" and shifted_table(results, task, encodings, "exact_match"):
            ood = next(r["out_of_distribution"]["task"] for r in results["runs"]
                       if r["task"] == task and "out_of_distribution" in r)
            lines += [f"Out of distribution: the same models on `{ood}` (the language drawn "
                      "otherwise: for flip-flop, p_i = 0.98, reads far from their write, "
                      "as Liu et al. 2023 test). Exact match:", ""]
            lines += shifted_table(results, task, encodings, "exact_match")
            lines += ["Token accuracy (share of answer tokens right) there:", ""]
            lines += shifted_table(results, task, encodings, "token_accuracy")
    lines += [
        "## Compared with the papers", "",
        f"{PAPER}, *The Impact of Positional Encoding on Length Generalization in "
        "Transformers* (NeurIPS 2023), train decoder-only models on synthetic tasks and "
        "find NoPE and T5's relative bias generalising best, ALiBi, RoPE and absolute "
        "encodings worst. Each of their pairwise orderings, checked on each decoder-only "
        "task here by exact match past L (the verdict) and, as secondary evidence, by "
        "token accuracy past L:", ""]
    lines += ["Their ordering: nope, t5 > alibi, rope, absolute. Measured here (`>`: apart "
              "beyond the spread, `=`: within it):", ""]
    for part, task, encodings in studied(results):
        if part == "lm":
            lines += [f"- {task}, exact match past L: "
                      f"{compact_ranking(results, part, task, encodings)}",
                      f"- {task}, token accuracy past L: "
                      f"{compact_ranking(results, part, task, encodings, 'token_accuracy')}"]
    lines += [""]
    if any(task == COPE_TASK for _, task, _ in studied(results)):
        lines += [f"On {COPE_TASK} the table adds the claim of {COPE_SOURCE}: positions "
                  "counted by content let a model find the i-th letter among any number of "
                  "blanks.", ""]
    lines += verdict_lines(results)
    lines += ["Their models are far larger (T5-base size) and trained far longer; these tiny "
              "CPU models test whether the ordering already shows at this scale.", ""]
    for name in plots or []:
        lines += [f"![accuracy against length]({name})", "",
                  "Exact match (top row) and token accuracy (bottom row) against test length "
                  "(log scale), one column per model and task: mean over seeds with error "
                  "bars of ± the spread; the dotted line marks the training length L.", ""]
    return "\n".join(lines)
