"""A run directory on disk: config, checkpoints, progress; and loading it back.

===========================  ================================================================
``config.json``              the TrainConfig, the corpus it saw (name, Python version, sha256)
                             and the tokenizer spec; written once when the run starts
``checkpoints/step-N/``      one checkpoint: ``model.safetensors`` (the weights, tied tensors
                             stored once, metadata ``step``), ``state.pt`` (optimizer,
                             scheduler and RNG states, ``torch.save``) and ``manifest.json``
``state.json``               the commit record: step, the checkpoint folder, the sha256 of each
                             of its files and the progress (steps, complete, final_loss, ...)
``tokenizer/``               the run's own tokenizer
``log.jsonl/.csv``           the training curve (see :mod:`posenc.train.logging`)
===========================  ================================================================

A checkpoint is all of its files or nothing: they are written into a temporary folder, made
durable, and the folder is renamed to ``step-N`` (one atomic rename); then ``state.json`` is
replaced atomically to point at it, and only then are older checkpoints deleted. A crash at any
moment leaves the previous complete checkpoint in place; :func:`recover` (run by ``train``
under the run's lock) removes temporaries a crash left and adopts a ``step-N`` folder that was
renamed but not yet recorded. Loading checks every file against the sha256 its folder's
``manifest.json`` records (and ``state.json``, which repeats them, must agree) and reports a
mismatch naming the file; a ``checkpoint`` entry naming anything but a folder of
``checkpoints/`` is refused. Every file and folder follows the umask, like the rest of the run.

The manifest also records the model's settings (``model_config``): a ``config.json`` that
disagrees with them (edited by hand: a field deleted or changed) is refused on load instead of
building another model. Runs written before the settings were recorded load unchecked.
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

from ..data.tokenizer import Tokenizer, load_tokenizer
from ..errors import UserError
from ..models.lm import TransformerLM
from ..runio import (
    TMP_SUFFIX,
    atomic_write,
    atomic_write_with,
    dir_mode,
    file_mode,
    fsync_dir,
    fsync_file,
    remove_stale_temporaries,
    sha256_file,
    temporary_prefix,
)
from .checkpoint_checks import check_model_config, checkpoint_dir, verify_file
from .config import TrainConfig
from .logging import read_log
from .run_layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_FILE,
    MODEL_FILE,
    PROGRESS_FILE,
    RUN_DIRS,
    RUN_FILES,
    STATE_FILE,
    TOKENIZER_DIR,
    one_line,
)


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
    """The parsed ``config.json`` with ``doc["train"]`` as a TrainConfig; UserError if bad."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise UserError(f"{run_dir} is not a posenc run: {CONFIG_FILE} is missing")
    try:
        doc = json.loads(path.read_text())
        if doc.get("format") != FORMAT:
            raise UserError(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
        if doc.get("format_version") != FORMAT_VERSION:
            raise UserError(f"format_version {doc.get('format_version')!r} is not supported")
        doc["train"] = TrainConfig.from_dict(doc["train"])
        doc["corpus"] = dict(doc["corpus"])
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"corrupt run config {path}: {one_line(err)}") from None
    return doc


def read_progress(run_dir: str | Path) -> dict[str, Any] | None:
    """The parsed ``state.json``, or None before the first checkpoint; UserError if corrupt."""
    path = Path(run_dir) / PROGRESS_FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        int(doc["step"])
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"corrupt checkpoint {path}: {one_line(err)}") from None
    return doc


def remove_run_files(run_dir: Path) -> None:
    """Delete the files a run writes (only those: other files in the folder stay)."""
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in RUN_DIRS:
        if (run_dir / name).is_dir():
            shutil.rmtree(run_dir / name)


# ------------------------------------------------------------- checkpoint
def committed_file(run_dir: str | Path, name: str = MODEL_FILE) -> Path:
    """The path of file ``name`` of the run's committed checkpoint (UserError if none)."""
    progress = read_progress(run_dir)
    if progress is None:
        raise UserError(f"run {run_dir} has no checkpoint yet ({PROGRESS_FILE} is missing)")
    return checkpoint_dir(run_dir, progress) / name


def save_checkpoint(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, step: int, progress: dict[str, Any]) -> None:
    """Write one checkpoint folder, commit it in ``state.json``, delete the older ones.

    A failed write (a full disk, a file system that refuses the file) raises OSError naming
    the file, on one line; the previous checkpoint stays the committed one."""
    state = {"step": step, "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "rng_torch": torch.get_rng_state(),
             "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
             "train_time_s": float(progress["train_time_s"]),
             "tokens_seen": int(progress["tokens_seen"])}
    root = run_dir / CHECKPOINTS_DIR
    root.mkdir(exist_ok=True)
    name = f"step-{step:08d}"
    final = root / name
    if final.exists():
        raise FileExistsError(f"checkpoint {final} exists already")
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=temporary_prefix(name), suffix=TMP_SUFFIX))
    try:
        os.chmod(tmp, dir_mode())                   # mkdtemp makes it 0700: follow the umask
        _write_file(tmp / STATE_FILE,
                    lambda: atomic_write_with(tmp / STATE_FILE, lambda f: torch.save(state, f)))
        _write_file(tmp / MODEL_FILE, lambda: _save_weights(model, tmp / MODEL_FILE, step))
        record = {"step": step, **progress, "checkpoint": f"{CHECKPOINTS_DIR}/{name}",
                  "files": {n: sha256_file(tmp / n) for n in (MODEL_FILE, STATE_FILE)}}
        config = getattr(model, "config", None)
        if hasattr(config, "to_dict"):
            record["model_config"] = config.to_dict()
        _write_file(tmp / MANIFEST_FILE, lambda: atomic_write(tmp / MANIFEST_FILE,
                                                              _json_bytes(record)))
        tmp.rename(final)                                 # the checkpoint now exists whole
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(root)
    atomic_write(run_dir / PROGRESS_FILE, _json_bytes(record))        # ... and is committed
    _prune(root, keep=name)


def _save_weights(model: nn.Module, path: Path, step: int) -> None:
    save_model(model, str(path), metadata={"format": FORMAT, "step": str(step)})
    os.chmod(path, file_mode())                 # safetensors writes 0600: follow the umask
    fsync_file(path)


def _write_file(path: Path, write: Any) -> None:
    """Call ``write()``; a failure to write ``path`` becomes one OSError naming it (torch and
    safetensors report a full disk as a RuntimeError from deep inside)."""
    try:
        write()
    except OSError as err:
        if err.filename is not None or str(path) in str(err):
            raise
        raise OSError(err.errno, f"cannot write checkpoint file {path}: "
                      f"{err.strerror or one_line(err)}") from err
    except Exception as err:  # noqa: BLE001 - RuntimeError / SafetensorError on a failed write
        raise OSError(f"cannot write checkpoint file {path}: {one_line(err)} (is the disk "
                      f"full?)") from err


def _json_bytes(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def _prune(root: Path, keep: str) -> None:
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith("step-") and p.name != keep:
            shutil.rmtree(p, ignore_errors=True)
    fsync_dir(root)


def recover(run_dir: str | Path) -> int | None:
    """Tidy a run folder after a crash (call it holding the run's lock): delete temporary
    files, adopt a complete checkpoint folder newer than ``state.json`` and delete the others.
    Returns the committed step, or None when there is no checkpoint."""
    run_dir = Path(run_dir)
    root = run_dir / CHECKPOINTS_DIR
    remove_stale_temporaries(run_dir)
    remove_stale_temporaries(root)
    progress = read_progress(run_dir)
    if not root.is_dir():
        return None if progress is None else int(progress["step"])
    newest = None
    for p in sorted(root.glob("step-*"), reverse=True):
        try:
            newest = json.loads((p / MANIFEST_FILE).read_text())
            int(newest["step"])
            break
        except (OSError, ValueError, KeyError, TypeError):
            continue                                  # not a checkpoint written by posenc
    if newest is not None and (progress is None or int(newest["step"]) > int(progress["step"])):
        atomic_write(run_dir / PROGRESS_FILE, _json_bytes(newest))
        progress = newest
    if progress is not None and progress.get("checkpoint"):
        _prune(root, keep=Path(progress["checkpoint"]).name)
    return None if progress is None else int(progress["step"])


def _weights_step(path: Path) -> int:
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        return int(meta["step"])
    except Exception as err:  # noqa: BLE001 - any failure to read the header is corruption
        raise UserError(f"corrupt checkpoint {path}: {one_line(err)}") from None


def load_weights(model: nn.Module, run_dir: Path, device: str | torch.device = "cpu",
                 progress: dict[str, Any] | None = None) -> int:
    """Load the committed weights into ``model``; returns their step. UserError if corrupt."""
    progress = read_progress(run_dir) if progress is None else progress
    if progress is None:
        raise UserError(f"run {run_dir} has no checkpoint yet ({PROGRESS_FILE} is missing)")
    folder = checkpoint_dir(run_dir, progress)
    path = verify_file(folder, MODEL_FILE, progress)
    check_model_config(model, run_dir, progress)
    step = _weights_step(path)
    try:
        load_model(model, path, strict=True, device=str(device))
    except Exception as err:  # noqa: BLE001 - shape/key mismatch or a damaged file
        raise UserError(f"corrupt checkpoint {path}: {one_line(err)}") from None
    if step != int(progress["step"]):
        raise UserError(f"checkpoint files in {run_dir} disagree (weights at step {step}, "
                         f"{PROGRESS_FILE} at step {progress['step']})")
    return step


def load_training_state(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                        scheduler: Any, device: torch.device) -> dict[str, Any]:
    """Restore the committed checkpoint for a resumed run; returns ``state.json``."""
    progress = read_progress(run_dir)
    if progress is None:
        raise UserError(f"run {run_dir} has no checkpoint to resume from")
    weights_step = load_weights(model, run_dir, device, progress)
    path = verify_file(checkpoint_dir(run_dir, progress), STATE_FILE, progress)
    try:
        state = torch.load(path, map_location=device, weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng_torch"].cpu())
        if state["rng_cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng_cuda"]])
        state_step = int(state["step"])
    except Exception as err:  # noqa: BLE001 - unreadable or mismatched optimizer state
        raise UserError(f"corrupt checkpoint {path}: not a posenc optimizer state "
                         f"({type(err).__name__})") from None
    if state_step != weights_step:
        raise UserError(f"checkpoint files in {run_dir} disagree (state.json step "
                         f"{progress['step']}, weights step {weights_step}, optimizer step "
                         f"{state_step}): a save was interrupted; start the run again "
                         f"(overwrite it)")
    return progress


# ------------------------------------------------------------------ load
def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> LoadedRun:
    """Load a trained run for evaluation. Missing or corrupt files raise one-line UserError.

    A run still training may commit a newer checkpoint (and delete this one) while it is
    read: the newest committed checkpoint is then read again."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run directory {run_dir} does not exist")
    doc = read_config(run_dir)
    cfg: TrainConfig = doc["train"]
    for attempt in range(3):
        progress = read_progress(run_dir)
        if progress is None:
            raise UserError(f"run {run_dir} has no checkpoint yet ({PROGRESS_FILE} is "
                             f"missing)")
        model = TransformerLM(cfg.model)
        try:
            step = load_weights(model, run_dir, device, progress)
            break
        except ValueError:
            if attempt == 2 or read_progress(run_dir) == progress:
                raise
    tokenizer = load_tokenizer(run_dir / TOKENIZER_DIR)
    return LoadedRun(model=model.to(device).eval(), train_config=cfg, tokenizer=tokenizer,
                     corpus_info=doc["corpus"], steps=step,
                     tokens_per_s=float(progress.get("tokens_per_s", 0.0)),
                     log=read_log(run_dir), run_dir=run_dir,
                     complete=bool(progress.get("complete", False)))
