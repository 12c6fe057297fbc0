"""What a run folder holds, by name, and the one-line form of an error about one of its files
(the layout :mod:`posenc.train.checkpoint` writes and :mod:`posenc.train.checkpoint_checks`
verifies)."""

from __future__ import annotations

from .logging import LOG_CSV, LOG_JSONL, TB_DIR

FORMAT = "posenc-run"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
STATE_FILE = "state.pt"
PROGRESS_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
CHECKPOINTS_DIR = "checkpoints"
TOKENIZER_DIR = "tokenizer"
RUN_FILES = (CONFIG_FILE, MODEL_FILE, STATE_FILE, PROGRESS_FILE, LOG_JSONL, LOG_CSV)
RUN_DIRS = (TOKENIZER_DIR, TB_DIR, CHECKPOINTS_DIR)


def one_line(err: BaseException) -> str:
    """The error's message on one line, with its first cause where the message puts it on
    the next line (torch's "Error(s) in loading state_dict for X:" then the mismatch)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    return " ".join(lines[:2]) + (" ..." if len(lines) > 2 else "")
