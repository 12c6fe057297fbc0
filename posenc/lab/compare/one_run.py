"""One run of a comparison: train it (or resume or reuse it) and evaluate it.

:func:`ensure_trained` trains an (encoding, seed) into its folder ``runs/<encoding>/seed<k>``
on the comparison's prepared data, resumes an interrupted training from its checkpoint, or
loads a finished run; :func:`evaluate_run` scores the loaded model (under an inference-time
scaling, if any) at every evaluation length, keeping every window's loss, with attention
entropy at modest lengths; :func:`run_head` is what results.json says of the run itself.
The comparison (:mod:`posenc.lab.compare.study`) and its worker processes
(:mod:`posenc.lab.compare.parallel_runs`) both call these.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ...eval.entropy import entropy_at_lengths
from ...eval.inference_scaling import (
    InferenceScaling,
    apply_inference_scaling,
    has_attention_weights,
    run_label,
)
from ..runs.variants import is_variant, run_family
from .presets import CompareConfig
from .progress import UnitProgress
from .study_data import StudyData, study_device
from .window_eval import window_losses

#: most points of a training curve kept in results.json
CURVE_POINTS = 200


def run_dir_of(encoding: str, seed: int) -> str:
    """Where one (encoding, seed) run lives, relative to the comparison directory."""
    return f"runs/{encoding}/seed{seed}"


def run_files(run_dir: str | Path) -> list[str]:
    """The files and folders a run writes into ``run_dir``, by exact name (a user's file
    beside them in the run folder is not among them)."""
    from ...train.run_layout import RUN_DIRS, RUN_FILES
    return [f"{Path(run_dir).as_posix()}/{name}" for name in (*RUN_FILES, *RUN_DIRS)]


def announce_run(run_dir: Path) -> None:
    """List a run's files among the outputs of the comparison folder holding ``run_dir``,
    before it is trained (:func:`posenc.runio.announce_output`; a no-op elsewhere)."""
    from ...runio import announce_output
    for name in run_files(run_dir):
        announce_output(name)


def _finished(run_dir: Path, steps: int, device: str):
    """The loaded run if ``run_dir`` holds a complete run of ``steps`` steps, else None."""
    from ...train.checkpoint import load_run
    if not (run_dir / "state.json").exists():
        return None
    try:
        loaded = load_run(run_dir, device)
    except ValueError:
        return None              # partial or damaged: train() resumes or reports it
    return loaded if loaded.complete and loaded.steps >= steps else None


def ensure_trained(cfg: CompareConfig, encoding: str, run_dir: Path, data: StudyData,
                   progress: UnitProgress, seed: int | None = None) -> tuple[Any, bool]:
    """Train, resume or reuse one encoding's run on the comparison's prepared ``data``;
    return (LoadedRun, trained now)."""
    from ...runio import has_content
    from ...train.checkpoint import load_run
    from ...train.loop import train
    from ...train.run_layout import CONFIG_FILE
    announce_run(run_dir)             # the comparison's own files, listed before they are made
    steps, device = cfg.train.steps, study_device(cfg.train)
    loaded = _finished(run_dir, steps, device)
    if loaded is not None:
        progress.update(steps)
        return loaded, False
    counted = [0]

    def on_step(step: int, record: dict, model) -> None:
        progress.update(step - counted[0])     # the first call also counts resumed steps
        counted[0] = step

    # a folder without a run, holding a user's files (an overwrite kept them): train beside
    beside = run_dir.is_dir() and has_content(run_dir) and not (run_dir / CONFIG_FILE).exists()
    train(cfg.train_config(encoding, data.vocab_size, seed), run_dir, overwrite=beside,
          progress=False, on_step=on_step, data=data.train)
    progress.update(max(0, steps - counted[0]))
    return load_run(run_dir, device), True


def _curve(log: list[dict]) -> list[list[float]]:
    points = [[int(e["step"]), float(e.get("loss", e.get("train_loss")))] for e in log
              if isinstance(e, dict) and "step" in e
              and isinstance(e.get("loss", e.get("train_loss")), (int, float))]
    if len(points) > CURVE_POINTS:
        every = -(-len(points) // CURVE_POINTS)
        points = points[::every] + ([points[-1]] if (len(points) - 1) % every else [])
    return points


def evaluate_run(cfg: CompareConfig, loaded, test_tokens, encoding: str, scaling: str | None,
                 progress: UnitProgress, run_dir: str | None = None) -> dict:
    """One seed's entry of a run: perplexity per length with every window's loss, entropy."""
    model = loaded.model
    tokens_per_step = cfg.train.tokens_per_step
    if scaling is not None:
        model = apply_inference_scaling(model, InferenceScaling.parse(scaling), cfg.train_len)
    start = time.perf_counter()
    scored = window_losses(model, test_tokens, cfg.eval_lengths, stride=cfg.stride,
                           max_tokens=cfg.eval_tokens,
                           progress=lambda n: progress.update(n * progress.eval_unit))
    entropy = None
    if cfg.entropy_lengths and has_attention_weights(scaling):
        entropy = {str(e.length): e.to_dict() if e.note is None else e.note
                   for e in entropy_at_lengths(model, test_tokens, cfg.entropy_lengths,
                                               eval_windows=cfg.entropy_windows, errors="note",
                                               keep_queries=True)}
    return {
        "seed": loaded.train_config.seed,
        "steps": loaded.steps,
        "train_tokens_per_s": loaded.tokens_per_s,
        "ppl": {str(w.length): w.ppl for w in scored},
        "ppl_tokens": {str(w.length): w.n_tokens for w in scored},
        "window_nll": {str(w.length): [round(x, 5) for x in w.nll] for w in scored},
        "window_tokens": {str(w.length): list(w.tokens) for w in scored},
        "final_loss": _final_loss(loaded.log),
        "curve": _curve(loaded.log) if scaling is None else None,
        "entropy": entropy,
        "seconds": {"eval": round(time.perf_counter() - start, 2),
                    "train": round(loaded.steps * tokens_per_step / loaded.tokens_per_s, 2)
                    if loaded.tokens_per_s else None},
        "run_dir": run_dir or f"runs/{encoding}",
    }


def _final_loss(log: list[dict]) -> float | None:
    curve = _curve(log)
    return curve[-1][1] if curve else None


def run_head(cfg: CompareConfig, loaded, encoding: str, scaling: str | None) -> dict:
    head = {"encoding": encoding, "inference_scaling": scaling}
    model = loaded.train_config.model
    variant = {"family": run_family(encoding), "pe": model.pe, "plan": model.plan} \
        if is_variant(encoding) else {}
    return {**head, "label": run_label(head), **variant,
            "options": dict(model.pe_options), "train_len": cfg.train_len,
            "steps": loaded.steps, "params": sum(p.numel() for p in loaded.model.parameters())}
