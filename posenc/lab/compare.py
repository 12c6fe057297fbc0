"""``posenc compare``: train every encoding short, test it long, write results, report, plots.

For each encoding of a :class:`~posenc.lab.presets.CompareConfig`, with the same data,
budget and seed: train into ``OUT/runs/<encoding>`` (:func:`posenc.train.loop.train`),
evaluate perplexity at every length (and attention entropy at modest ones) on the held-out
test split, and for RoPE also evaluate each inference-time scaling on the same weights.

Nothing is lost on a crash: ``results.json`` is rewritten atomically after every run (with
report.md and the PNGs), and a second call with the same configuration resumes: finished
runs are kept, an interrupted training resumes from its checkpoint. An output directory
that holds a different comparison (or other files) is refused unless ``overwrite``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..encodings import encoding_options
from ..eval.entropy import entropy_at_lengths
from ..eval.inference_scaling import (InferenceScaling, accepts_rope_scaling,
                                      apply_inference_scaling)
from ..eval.lengths import eval_device, perplexity_at_lengths
from ..viz.plots import plot_all
from .claims import label_of
from .presets import CompareConfig
from .report import write_report

RESULTS = "results.json"
OUTPUTS = ("results.json", "report.md", "ppl_vs_length.png", "training_curves.png",
           "entropy_vs_length.png")
#: most points of a training curve kept in results.json
CURVE_POINTS = 200


@dataclass(frozen=True)
class CompareOutcome:
    """What a comparison wrote and which runs it trained now or reused."""

    out_dir: Path
    results: dict
    report: Path
    plots: tuple[Path, ...]
    trained: tuple[str, ...]
    reused: tuple[str, ...]


# ------------------------------------------------------------------ output directory
def read_results(out_dir: Path) -> dict | None:
    """The results.json in ``out_dir``, None if absent; ValueError if unreadable."""
    path = Path(out_dir) / RESULTS
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err.msg if hasattr(err, 'msg') else err})"
                         "; pass --overwrite to start the comparison over") from None
    if not isinstance(data, dict) or not {"config", "corpus", "runs"} <= set(data):
        raise ValueError(f"{path} is not a posenc comparison (needs config, corpus and runs); "
                         "pass --overwrite to replace it")
    return data


def check_out_dir(cfg: CompareConfig, out_dir: Path, overwrite: bool) -> dict | None:
    """Refuse an output directory holding something else; return resumable results or None.

    Has no side effects: nothing is written or removed here.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"--out {out_dir} exists and is not a directory")
    if overwrite:
        return None
    existing = read_results(out_dir)
    if existing is not None:
        theirs, ours = existing["config"], cfg.to_dict()
        if theirs != ours:
            diff = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
            raise ValueError(f"{out_dir} holds a different comparison (differs in "
                             f"{', '.join(diff)}); pass --overwrite to replace it or choose "
                             "another --out")
        return existing
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"{out_dir} is not empty and holds no comparison ({RESULTS}); choose "
                         "a new or empty directory, or pass --overwrite")
    return None


def clear_outputs(out_dir: Path) -> None:
    """Remove what a comparison writes (results, report, plots, runs/); nothing else."""
    out_dir = Path(out_dir)
    if (out_dir / RESULTS).exists() and (out_dir / "runs").is_dir():
        shutil.rmtree(out_dir / "runs")
    for name in OUTPUTS:
        (out_dir / name).unlink(missing_ok=True)


def json_safe(obj: Any) -> Any:
    """``obj`` with non-finite floats written as the strings "inf", "-inf" or "nan"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def save_results(out_dir: Path, results: dict) -> Path:
    """Write results.json atomically (temp file + rename)."""
    path = Path(out_dir) / RESULTS
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(json_safe(results), indent=2, allow_nan=False) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_outputs(out_dir: Path, results: dict, plots: bool = True
                  ) -> tuple[Path, list[Path]]:
    """results.json, then (if ``plots``) the PNGs, then report.md, all from the results."""
    save_results(out_dir, results)
    paths = plot_all(results, out_dir) if plots and results["runs"] else []
    return write_report(results, out_dir, [p.name for p in paths]), paths


# ------------------------------------------------------------------ the plan
def planned_runs(cfg: CompareConfig) -> list[tuple[str, str | None]]:
    """(encoding, inference scaling label or None) for every run, in report order."""
    plan = []
    for enc in cfg.encodings:
        plan.append((enc, None))
        if accepts_rope_scaling(enc):
            plan += [(enc, InferenceScaling.parse(s).label) for s in cfg.scalings]
    return plan


def train_config(cfg: CompareConfig, encoding: str, vocab_size: int):
    """The TrainConfig of one encoding: identical for all but ``model.pe``."""
    from ..models import LMConfig
    from ..train.config import TrainConfig
    options = cfg.options_for(encoding)
    declared = encoding_options(encoding)
    if "vocab_size" in declared and declared["vocab_size"] is None:   # token-id tables
        options.setdefault("vocab_size", vocab_size)
    model = LMConfig(vocab_size=vocab_size, d_model=cfg.d_model, n_layers=cfg.n_layers,
                     n_heads=cfg.n_heads, max_len=cfg.train_len, pe=encoding,
                     pe_options=options)
    return TrainConfig(model=model, data=cfg.data, tokenizer=cfg.tokenizer,
                       train_len=cfg.train_len, batch_size=cfg.batch_size, steps=cfg.steps,
                       lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                       weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip, seed=cfg.seed,
                       bf16=cfg.bf16, eval_every=0, checkpoint_every=max(1, cfg.steps // 4))


def _check_encoding(cfg: CompareConfig, encoding: str) -> None:
    """Validate an encoding's TrainConfig and build its encoding as the model would."""
    from ..encodings import build_encoding
    options = train_config(cfg, encoding, 256).model.pe_options
    build_encoding(encoding, n_heads=cfg.n_heads, head_dim=cfg.d_model // cfg.n_heads,
                   max_len=cfg.train_len, **options)


class _Progress:
    """One tqdm bar over the whole job; a training step counts 1, an evaluation length more."""

    def __init__(self, cfg: CompareConfig, enabled: bool) -> None:
        from tqdm.auto import tqdm
        self.eval_unit = max(1, round(cfg.eval_tokens / (3 * cfg.batch_size * cfg.train_len)))
        n_eval = len(planned_runs(cfg)) * len(cfg.eval_lengths)
        self.bar = tqdm(total=len(cfg.encodings) * cfg.steps + n_eval * self.eval_unit,
                        disable=not enabled, desc="compare", dynamic_ncols=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}"
                                   " {postfix}")

    def update(self, units: int) -> None:
        self.bar.update(units)

    def stage(self, text: str) -> None:
        self.bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        self.bar.close()


def _finished(run_dir: Path, steps: int):
    """The loaded run if ``run_dir`` holds a complete run of ``steps`` steps, else None."""
    from ..train.checkpoint import load_run
    if not (run_dir / "state.json").exists():
        return None
    try:
        loaded = load_run(run_dir, eval_device())
    except ValueError:
        return None              # partial or damaged: train() resumes or reports it
    return loaded if loaded.complete and loaded.steps >= steps else None


def ensure_trained(cfg: CompareConfig, encoding: str, run_dir: Path, vocab_size: int,
                   progress: _Progress) -> tuple[Any, bool]:
    """Train, resume or reuse one encoding's run; return (LoadedRun, trained now)."""
    from ..train.checkpoint import load_run
    from ..train.loop import train
    loaded = _finished(run_dir, cfg.steps)
    if loaded is not None:
        progress.update(cfg.steps)
        return loaded, False
    counted = [0]

    def on_step(step: int, record: dict, model) -> None:
        progress.update(step - counted[0])     # the first call also counts resumed steps
        counted[0] = step

    train(train_config(cfg, encoding, vocab_size), run_dir, resume=True, progress=False,
          on_step=on_step)
    progress.update(max(0, cfg.steps - counted[0]))
    return load_run(run_dir, eval_device()), True


def _curve(log: list[dict]) -> list[list[float]]:
    points = [[int(e["step"]), float(e.get("loss", e.get("train_loss")))] for e in log
              if isinstance(e, dict) and "step" in e
              and isinstance(e.get("loss", e.get("train_loss")), (int, float))]
    if len(points) > CURVE_POINTS:
        every = -(-len(points) // CURVE_POINTS)
        points = points[::every] + ([points[-1]] if (len(points) - 1) % every else [])
    return points


def evaluate_run(cfg: CompareConfig, loaded, test_tokens, encoding: str, scaling: str | None,
                 progress: _Progress) -> dict:
    """One results.json run entry: perplexity (and entropy) against length."""
    model = loaded.model
    tokens_per_step = cfg.batch_size * cfg.train_len
    if scaling is not None:
        model = apply_inference_scaling(model, InferenceScaling.parse(scaling), cfg.train_len)
    start = time.perf_counter()
    ppl = perplexity_at_lengths(model, test_tokens, cfg.eval_lengths, stride=cfg.stride,
                                max_tokens=cfg.eval_tokens, errors="note",
                                progress=lambda n: progress.update(n * progress.eval_unit))
    entropy = None
    if cfg.entropy_lengths:
        entropy = {str(e.length): e.to_dict() if e.note is None else e.note
                   for e in entropy_at_lengths(model, test_tokens, cfg.entropy_lengths,
                                               n_windows=cfg.entropy_windows, errors="note")}
    return {
        "encoding": encoding,
        "options": dict(loaded.train_config.model.pe_options),
        "train_len": cfg.train_len,
        "steps": loaded.steps,
        "train_tokens_per_s": loaded.tokens_per_s,
        "ppl": {str(r.length): r.value for r in ppl},
        "inference_scaling": scaling,
        "label": encoding + (f"+{scaling}" if scaling else ""),
        "final_loss": _final_loss(loaded.log),
        "params": sum(p.numel() for p in loaded.model.parameters()),
        "ppl_tokens": {str(r.length): r.n_tokens for r in ppl},
        "entropy": entropy,
        "seconds": {"eval": round(time.perf_counter() - start, 2),
                    "train": round(loaded.steps * tokens_per_step / loaded.tokens_per_s, 2)
                    if loaded.tokens_per_s else None},
        "run_dir": f"runs/{encoding}",
    }


def _final_loss(log: list[dict]) -> float | None:
    curve = _curve(log)
    return curve[-1][1] if curve else None


# ------------------------------------------------------------------ the job
def run_compare(cfg: CompareConfig, out_dir: Path, *, overwrite: bool = False,
                progress: bool = True) -> CompareOutcome:
    """Run (or resume) the comparison ``cfg`` into ``out_dir``; see the module docstring."""
    from ..data.cache import default_cache_dir, token_stream
    from ..data.corpora import load_corpus
    from ..data.tokenizer import build_tokenizer
    out_dir = Path(out_dir)
    existing = check_out_dir(cfg, out_dir, overwrite)
    for encoding in cfg.encodings:            # every run's config is valid before we start
        _check_encoding(cfg, encoding)
    corpus = load_corpus(cfg.data)
    cache_dir = default_cache_dir()            # where `posenc train` caches data by default
    tokenizer = build_tokenizer(cfg.tokenizer, corpus, cache_dir)
    test_tokens = token_stream(corpus, tokenizer, "test", cache_dir)
    if max(cfg.eval_lengths) > len(test_tokens):
        raise ValueError(f"evaluation length {max(cfg.eval_lengths)} is longer than the test "
                         f"split ({len(test_tokens)} tokens); use shorter --lengths or more "
                         "data")
    if existing is not None and existing["corpus"] != corpus.info():
        raise ValueError(f"{out_dir} holds a comparison on another corpus "
                         f"({existing['corpus'].get('name')}, sha256 "
                         f"{str(existing['corpus'].get('sha256'))[:12]}); pass --overwrite "
                         "to replace it")
    # everything is validated: from here on the directory is ours
    if overwrite:
        clear_outputs(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = existing or {"config": cfg.to_dict(), "corpus": corpus.info(), "runs": []}
    done = {label_of(r) for r in results["runs"]}
    save_results(out_dir, results)
    bar = _Progress(cfg, progress)
    trained, reused = [], []
    try:
        for encoding in cfg.encodings:
            plan = [s for e, s in planned_runs(cfg) if e == encoding]
            todo = [s for s in plan if label_of({"encoding": encoding,
                                                 "inference_scaling": s}) not in done]
            if not todo:
                bar.update(cfg.steps + len(plan) * len(cfg.eval_lengths) * bar.eval_unit)
                reused.append(encoding)
                continue
            bar.update((len(plan) - len(todo)) * len(cfg.eval_lengths) * bar.eval_unit)
            bar.stage(f"train {encoding}")
            loaded, did_train = ensure_trained(cfg, encoding, out_dir / "runs" / encoding,
                                               tokenizer.vocab_size, bar)
            (trained if did_train else reused).append(encoding)
            for scaling in todo:
                label = encoding + (f"+{scaling}" if scaling else "")
                bar.stage(f"eval {label}")
                entry = evaluate_run(cfg, loaded, test_tokens, encoding, scaling, bar)
                if scaling is None:
                    entry["curve"] = _curve(loaded.log)
                results["runs"].append(entry)
                write_outputs(out_dir, results, plots=False)   # plots once, at the end
        report, plots = write_outputs(out_dir, results)
    finally:
        bar.close()
    return CompareOutcome(out_dir, results, report, tuple(plots), tuple(trained),
                          tuple(reused))
