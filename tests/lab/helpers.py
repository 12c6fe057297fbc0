"""Shared by the lab tests: hand-made comparison results (``results``, as results.json
holds them) and a synthetic-task study whose training is replaced by a lookup."""

from __future__ import annotations

import math

import numpy as np

from posenc.lab.compare.presets import CompareConfig
from posenc.lab.compare.results import aggregate
from posenc.lab.tasks import study as task_study
from posenc.lab.tasks.presets import TaskStudyConfig
from posenc.lab.tasks.study import run_task_study

L = 64
LENGTHS = (64, 128, 256, 512, 1024)
#: standard deviation of window losses around their mean, in nats (bootstrap noise)
WINDOW_NOISE = 0.02


def seed_entry(seed, ppl, noise=WINDOW_NOISE, tps=20000.0, entropy=None, curve=True,
               text=0):
    """One seed's entry; window losses scatter by ``noise`` around log(ppl), in a pattern
    fixed by the length and ``text`` (equal ``text``: the same text, equally hard for every
    run)."""
    entry = {"seed": seed, "train_tokens_per_s": tps, "ppl": {}, "window_nll": {},
             "window_tokens": {}, "final_loss": 3.0, "seconds": {"train": 10.0, "eval": 1.0},
             "run_dir": f"runs/x/seed{seed}"}
    for n, v in zip(LENGTHS, ppl):
        entry["ppl"][str(n)] = v
        if isinstance(v, (int, float)):         # 8 x 1024 tokens, as evaluation windows
            count = 8 * LENGTHS[-1] // n
            jitter = np.random.default_rng([n, text]).normal(size=count)
            jitter = noise * (jitter - jitter.mean()) / jitter.std()
            entry["window_nll"][str(n)] = (math.log(v) + jitter).tolist()
            entry["window_tokens"][str(n)] = [n - 1] * count
    if entropy is not None:
        entry["entropy"] = {str(n): {"mean": e - 0.2, "tail": e, "per_layer": [e],
                                     "uniform_tail": math.log(n), "n_windows": 1, "note": None}
                            for n, e in zip(LENGTHS, entropy)}
    if curve:
        entry["curve"] = [[s, 5.0 - s / 50 + 0.01 * seed] for s in range(0, 101, 10)]
    return entry


def run(encoding, ppl, scaling=None, seeds=(0,), spread=0.0, noise=WINDOW_NOISE, text=0,
        **kw):
    """A run entry; with several seeds, their perplexities are scaled by factors
    1 + k * spread, k symmetric around 0 (so the mean stays ``ppl``)."""
    mid = (len(seeds) - 1) / 2
    entries = [seed_entry(s, [v * (1 + (i - mid) * spread) if isinstance(v, float) else v
                              for v in ppl], noise, curve=scaling is None, text=text + s,
                          **kw)
               for i, s in enumerate(seeds)]
    head = {"encoding": encoding, "inference_scaling": scaling,
            "label": encoding + (f"+{scaling}" if scaling else ""), "options": {},
            "train_len": L, "steps": 100, "params": 1000}
    return aggregate(entries, head)


def results(seeds=(0,), spread=0.0, **changes):
    def r(*a, **kw):
        return run(*a, seeds=seeds, spread=spread, **kw)
    runs = [
        r("learned", [5.5] + ["n/a (past learned table of 64)"] * 4),
        r("sinusoidal", [5.6, 30.0, 200.0, 900.0, 3000.0], tps=26000),
        r("rope", [5.2, 6.5, 9.0, 14.0, 22.0], tps=25000, entropy=[2.0, 2.3, 2.6, 2.8, 3.0]),
        r("rope", [7.0, 7.5, 8.0, 15.0, 25.0], "linear:4"),
        r("rope", [5.3, 5.6, 6.1, 9.0, 16.0], "ntk:4"),
        r("rope", [5.2, 5.5, 6.0, 8.0, 12.0], "dynamic"),
        r("rope", [5.3, 5.5, 5.9, 8.5, 14.0], "yarn:4"),
        r("rope", [5.2, 6.2, 8.5, 13.0, 20.0], "logn", entropy=[2.0, 2.2, 2.4, 2.5, 2.6]),
        r("alibi", [5.4, 5.3, 5.25, 5.25, 5.26], tps=27000, entropy=[1.5, 1.6, 1.6, 1.6, 1.6]),
        r("t5", [5.3, 5.3, 5.4, 5.6, 5.9], tps=21000),
    ]
    cfg = CompareConfig(encodings=("learned", "sinusoidal", "rope", "alibi", "t5"),
                        scalings=("linear:4", "ntk:4", "dynamic", "yarn:4", "logn"),
                        seeds=len(seeds), lengths=LENGTHS).with_options(train_len=L, steps=100)
    rel = {"alibi": [0.9, 0.92, 0.91], "sinusoidal": [0.95, 0.94, 0.96],
           "rope": [1.05, 1.04, 1.06], "t5": [1.2, 1.25, 1.22], "learned": [1.0, 1.0, 1.0]}
    out = {"config": cfg.to_dict(),
           "corpus": {"name": "stdlib", "python_version": "3.11", "sha256": "ab" * 32},
           "baseline": {"unigram_ppl": 20.0, "tokens": 4096, "learned_fraction": 0.7},
           "timing": {"rounds": 3, "step_seconds": {k: [0.05 * x for x in v]
                                                    for k, v in rel.items()},
                      "relative_to_median": rel},
           "runs": runs}
    out.update(changes)
    return out


TINY = TaskStudyConfig(
    preset="test", encodings=("nope", "alibi"), seq2seq_encodings=("rope",), seeds=(0, 1),
    length_multipliers=(1, 2), eval_examples=5,
).with_options(train_len=8, d_model=16, n_layers=1, n_heads=2, steps=3, batch_size=4,
               seq2seq_len=3, seq2seq_min_len=2, seq2seq_steps=3)


def _pair(value) -> tuple[float, float]:
    """(exact match, token accuracy): a float stands for both."""
    return value if isinstance(value, tuple) else (value, value)


def fake_runs(monkeypatch, table: dict[tuple[str, int], dict[int, float]] | None = None):
    """Replace training by a lookup: exact match ``table[(encoding, seed)][length]``
    (default 0.5); returns the list of runs "trained"."""
    calls = []

    def run_one(cfg, part, task, encoding, seed, on_step=None):
        calls.append((part, task, encoding, seed))
        base = cfg.train_len if part == "lm" else cfg.seq2seq_len
        lengths = cfg.lm_lengths if part == "lm" else cfg.seq2seq_lengths
        values = (table or {}).get((encoding, seed), {})
        return {"part": part, "task": task, "encoding": encoding, "seed": seed,
                "options": {}, "train_len": base, "final_loss": 1.0, "curve": [[1, 1.0]],
                "params": 1, "seconds": {"train": 0.0, "eval": 0.0},
                "lengths": {str(n): {"exact_match": _pair(values.get(n, 0.5))[0],
                                     "token_accuracy": _pair(values.get(n, 0.5))[1],
                                     "n_examples": cfg.eval_examples, "note": None}
                            for n in lengths}}
    monkeypatch.setattr(task_study, "run_one", run_one)
    return calls


def study_results(tmp_path, monkeypatch, a: list[float], b: list[float], at_l: float = 0.9):
    """A study where nope (a) and rope (b) score the given exact match past L per seed."""
    cfg = TaskStudyConfig.from_dict({**TINY.to_dict(), "encodings": ["nope", "rope"],
                                     "seeds": list(range(len(a))), "seq2seq_task": None,
                                     "eval_examples": 1000})
    table = {}
    for enc, values in (("nope", a), ("rope", b)):
        for seed, v in enumerate(values):
            table[(enc, seed)] = {8: at_l, 16: v}
    fake_runs(monkeypatch, table)
    return run_task_study(tmp_path, cfg, progress=False)
