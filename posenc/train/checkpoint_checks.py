"""Checking a checkpoint against its records before anything is loaded from it.

Which folder ``state.json`` names (never one outside ``checkpoints/``), every file against the
sha256 its folder's ``manifest.json`` records, and the model's settings against those the
checkpoint was written with. Each refusal is one line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import nn

from ..errors import UserError
from ..runio import sha256_file
from .run_layout import CHECKPOINTS_DIR, CONFIG_FILE, MANIFEST_FILE, PROGRESS_FILE, one_line


def checkpoint_dir(run_dir: str | Path, progress: dict[str, Any]) -> Path:
    """The folder holding the files of the checkpoint ``state.json`` names (the run folder
    itself for runs written before checkpoints had their own folders). A name that is not a
    folder of ``checkpoints/`` (``../..``, an absolute path) is refused: UserError."""
    name = progress.get("checkpoint")
    if not name:
        return Path(run_dir)
    folder = Path(run_dir) / str(name)
    inside = isinstance(name, str) and not Path(name).is_absolute() and \
        folder.resolve().parent == (Path(run_dir) / CHECKPOINTS_DIR).resolve()
    if not inside:
        raise UserError(f"corrupt checkpoint record {Path(run_dir) / PROGRESS_FILE}: "
                        f"checkpoint {name!r} is not a folder of {CHECKPOINTS_DIR}/")
    return folder


def verify_file(folder: Path, name: str, progress: dict[str, Any]) -> Path:
    """``folder/name``, checked against the sha256 recorded for it (UserError otherwise).

    In a ``checkpoints/`` folder the record is the folder's ``manifest.json``, which must
    exist and agree with ``state.json`` (``progress``); the run folder itself (runs written
    before checkpoints had their own folders) has only ``state.json``'s."""
    path = folder / name
    if not path.is_file():
        raise UserError(f"corrupt checkpoint {path}: the file is missing")
    expected = (progress.get("files") or {}).get(name)
    if progress.get("checkpoint"):                       # a folder of checkpoints/
        recorded = read_manifest(folder, progress).get("files")
        if not isinstance(recorded, dict) or not isinstance(recorded.get(name), str):
            raise UserError(f"corrupt checkpoint {folder / MANIFEST_FILE}: it records no "
                            f"sha256 for {name}")
        if expected is not None and expected != recorded[name]:
            raise UserError(f"corrupt checkpoint {path}: {PROGRESS_FILE} and "
                            f"{MANIFEST_FILE} record different sha256 for it")
        expected = recorded[name]
    if expected is not None:
        actual = sha256_file(path)
        if actual != expected:
            raise UserError(f"corrupt checkpoint {path}: sha256 {actual[:12]}... differs from "
                             f"the recorded {expected[:12]}... (the file changed after it was "
                             f"written)")
    return path


def read_manifest(folder: Path, progress: dict[str, Any]) -> dict[str, Any]:
    """The ``manifest.json`` of checkpoint ``folder``; UserError if it is missing, corrupt or
    names another step than ``state.json`` (``progress``)."""
    path = folder / MANIFEST_FILE
    try:
        doc = json.loads(path.read_text())
        same_step = int(doc["step"]) == int(progress["step"])
    except FileNotFoundError:
        raise UserError(f"corrupt checkpoint {path}: the file is missing") from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"corrupt checkpoint {path}: {one_line(err)}") from None
    if not same_step:
        raise UserError(f"corrupt checkpoint {path}: step {doc['step']} differs from "
                        f"{PROGRESS_FILE}'s {progress['step']}")
    return doc


def check_model_config(model: nn.Module, run_dir: Path, progress: dict[str, Any]) -> None:
    """Refuse a model built from settings other than those its checkpoint was written with
    (``config.json`` edited by hand). ``attn_backend`` may differ (it changes no weights)."""
    recorded = progress.get("model_config")
    if progress.get("checkpoint"):
        folder = checkpoint_dir(run_dir, progress)
        recorded = read_manifest(folder, progress).get("model_config", recorded)
    config = getattr(model, "config", None)
    if not isinstance(recorded, dict) or not hasattr(config, "to_dict"):
        return                                   # written before settings were recorded
    current = config.to_dict()
    differ = sorted(k for k in recorded.keys() | current.keys() if k != "attn_backend" and
                    json.dumps(recorded.get(k), sort_keys=True) !=
                    json.dumps(current.get(k), sort_keys=True))
    if differ:
        shown = ", ".join(f"{k} {current.get(k)!r} (checkpoint: {recorded.get(k)!r})"
                          for k in differ[:4])
        raise UserError(f"{Path(run_dir) / CONFIG_FILE} does not match the model its "
                        f"checkpoint was written with: {shown}; was {CONFIG_FILE} edited?")
