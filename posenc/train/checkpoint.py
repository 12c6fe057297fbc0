"""A run directory on disk: config, weights, optimizer state, progress; and loading it back.

======================  ===================================================================
``config.json``         the TrainConfig, the corpus it saw (name, Python version, sha256)
                        and the tokenizer spec; written once when the run starts
``model.safetensors``   the weights (tied tensors stored once), metadata ``step``
``state.pt``            optimizer, scheduler and RNG states and the step (``torch.save``)
``state.json``          progress: step, steps, complete, final_loss, tokens_per_s, ...;
                        written last, so it names the step of a complete checkpoint
``tokenizer/``          the run's own tokenizer
``log.jsonl/.csv``      the training curve (see :mod:`posenc.train.logging`)
======================  ===================================================================

Every file is written to a temporary name and renamed into place. Loading checks that the
weights, the optimizer state and ``state.json`` name the same step (a save interrupted
between two files is reported, never silently mixed).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model
from torch import nn

from ..data.cache import FILE_MODE, atomic_write, atomic_write_with
from ..data.tokenizer import Tokenizer, load_tokenizer
from ..models.lm import TransformerLM
from .config import TrainConfig
from .logging import LOG_CSV, LOG_JSONL, TB_DIR, read_log

FORMAT = "posenc-run"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
STATE_FILE = "state.pt"
PROGRESS_FILE = "state.json"
TOKENIZER_DIR = "tokenizer"
RUN_FILES = (CONFIG_FILE, MODEL_FILE, STATE_FILE, PROGRESS_FILE, LOG_JSONL, LOG_CSV)
RUN_DIRS = (TOKENIZER_DIR, TB_DIR)


@dataclass(frozen=True)
class LoadedRun:
    """A trained run, ready for evaluation: the model is in eval mode on ``device``."""

    model: TransformerLM
    train_config: TrainConfig
    tokenizer: Tokenizer
    corpus_info: dict[str, str]
    steps: int
    tokens_per_s: float
    log: list[dict[str, Any]]
    run_dir: Path | None = None
    complete: bool = True


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


# ----------------------------------------------------------------- config
def write_config(run_dir: Path, cfg: TrainConfig, corpus_info: dict[str, str],
                 tokenizer: Tokenizer) -> None:
    """Write ``config.json`` and the run's tokenizer (once, at the start of a run)."""
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "train": cfg.to_dict(),
           "corpus": dict(corpus_info),
           "tokenizer": {"spec": tokenizer.spec, "vocab_size": tokenizer.vocab_size,
                         "fingerprint": tokenizer.fingerprint},
           "torch_version": torch.__version__, "python_version": platform.python_version()}
    atomic_write(run_dir / CONFIG_FILE, (json.dumps(doc, indent=2) + "\n").encode())
    tokenizer.save(run_dir / TOKENIZER_DIR)


def read_config(run_dir: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` with ``doc["train"]`` as a TrainConfig; ValueError if bad."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"{run_dir} is not a posenc run: {CONFIG_FILE} is missing")
    try:
        doc = json.loads(path.read_text())
        if doc.get("format") != FORMAT:
            raise ValueError(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
        if doc.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"format_version {doc.get('format_version')!r} is not supported")
        doc["train"] = TrainConfig.from_dict(doc["train"])
        doc["corpus"] = dict(doc["corpus"])
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"corrupt run config {path}: {_one_line(err)}") from None
    return doc


def read_progress(run_dir: str | Path) -> dict[str, Any] | None:
    """The parsed ``state.json``, or None before the first checkpoint; ValueError if corrupt."""
    path = Path(run_dir) / PROGRESS_FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        int(doc["step"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"corrupt checkpoint {path}: {_one_line(err)}") from None
    return doc


def remove_run_files(run_dir: Path) -> None:
    """Delete the files a run writes (only those: other files in the folder stay)."""
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in RUN_DIRS:
        if (run_dir / name).is_dir():
            shutil.rmtree(run_dir / name)


# ------------------------------------------------------------- checkpoint
def save_checkpoint(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, step: int, progress: dict[str, Any]) -> None:
    """Write weights, optimizer state and then ``state.json`` (the commit record)."""
    state = {"step": step, "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "rng_torch": torch.get_rng_state(),
             "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
             "train_time_s": float(progress["train_time_s"]),
             "tokens_seen": int(progress["tokens_seen"])}
    atomic_write_with(run_dir / STATE_FILE, lambda f: torch.save(state, f))
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f".{MODEL_FILE}.", suffix=".tmp")
    os.close(fd)
    try:
        save_model(model, tmp, metadata={"format": FORMAT, "step": str(step)})
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, run_dir / MODEL_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    atomic_write(run_dir / PROGRESS_FILE,
                 (json.dumps({"step": step, **progress}, indent=2) + "\n").encode())


def _weights_step(path: Path) -> int:
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        return int(meta["step"])
    except Exception as err:  # noqa: BLE001 - any failure to read the header is corruption
        raise ValueError(f"corrupt checkpoint {path}: {_one_line(err)}") from None


def load_weights(model: nn.Module, run_dir: Path, device: str | torch.device = "cpu") -> int:
    """Load ``model.safetensors`` into ``model``; returns its step. ValueError if corrupt."""
    path = run_dir / MODEL_FILE
    if not path.is_file():
        raise ValueError(f"run {run_dir} has no checkpoint yet: {MODEL_FILE} is missing")
    step = _weights_step(path)
    try:
        load_model(model, path, strict=True, device=str(device))
    except Exception as err:  # noqa: BLE001 - shape/key mismatch or a damaged file
        raise ValueError(f"corrupt checkpoint {path}: {_one_line(err)}") from None
    return step


def load_training_state(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                        scheduler: Any, device: torch.device) -> dict[str, Any]:
    """Restore a checkpoint for ``--resume``; returns ``state.json`` (with the step)."""
    progress = read_progress(run_dir)
    if progress is None:
        raise ValueError(f"run {run_dir} has no checkpoint to resume from")
    weights_step = load_weights(model, run_dir, device)
    try:
        state = torch.load(run_dir / STATE_FILE, map_location=device, weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng_torch"].cpu())
        if state["rng_cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng_cuda"]])
    except Exception as err:  # noqa: BLE001 - unreadable or mismatched optimizer state
        raise ValueError(f"corrupt checkpoint {run_dir / STATE_FILE}: {_one_line(err)}"
                         ) from None
    steps = {int(progress["step"]), weights_step, int(state["step"])}
    if len(steps) != 1:
        raise ValueError(f"checkpoint files in {run_dir} disagree (state.json step "
                         f"{progress['step']}, weights step {weights_step}, optimizer step "
                         f"{state['step']}): a save was interrupted; start again with "
                         f"--overwrite")
    return progress


# ------------------------------------------------------------------ load
def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> LoadedRun:
    """Load a trained run for evaluation. Missing or corrupt files raise one-line ValueError."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"run directory {run_dir} does not exist")
    doc = read_config(run_dir)
    cfg: TrainConfig = doc["train"]
    progress = read_progress(run_dir)
    if progress is None:
        raise ValueError(f"run {run_dir} has no checkpoint yet ({PROGRESS_FILE} is missing)")
    model = TransformerLM(cfg.model)
    step = load_weights(model, run_dir, device)
    if step != int(progress["step"]):
        raise ValueError(f"checkpoint files in {run_dir} disagree (weights at step {step}, "
                         f"{PROGRESS_FILE} at step {progress['step']})")
    tokenizer = load_tokenizer(run_dir / TOKENIZER_DIR)
    return LoadedRun(model=model.to(device).eval(), train_config=cfg, tokenizer=tokenizer,
                     corpus_info=doc["corpus"], steps=step,
                     tokens_per_s=float(progress.get("tokens_per_s", 0.0)),
                     log=read_log(run_dir), run_dir=run_dir,
                     complete=bool(progress.get("complete", False)))
