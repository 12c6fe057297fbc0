"""The training curve: ``log.jsonl`` (one JSON object per record), ``log.csv`` with the same
records, and TensorBoard event files under ``tensorboard/`` when tensorboard is installed;
and the progress shown while a job runs (:func:`progress_bar`: a tqdm bar on a terminal,
plain lines elsewhere).

Records are ``{"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "elapsed_s"}``
for training steps (``tokens`` and ``elapsed_s`` count the whole run: all processes' tokens,
training seconds without evaluations and checkpoints) and ``{"step", "val_loss"}`` for
evaluations. When a run resumes from a
checkpoint at step k, records after step k (written before the interruption) are dropped, so
the log reads as if the run had never stopped. A crash while a record is appended leaves a
torn final line: readers skip it (a bad line anywhere else is reported as corruption).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..runio import atomic_write

LOG_JSONL = "log.jsonl"
LOG_CSV = "log.csv"
TB_DIR = "tensorboard"
CSV_FIELDS = ("step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "elapsed_s",
              "val_loss")


def read_log(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``run_dir/log.jsonl`` ([] if there is none); UserError if corrupt."""
    path = Path(run_dir) / LOG_JSONL
    if not path.is_file():
        return []
    records = []
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines):
                break                                 # torn by a crash while appending
            raise UserError(f"corrupt training log {path}: line {i} is not JSON") from None
    return records


class RunLog:
    """Appends records to the run's logs; ``start_step`` > 0 truncates a resumed run's logs."""

    def __init__(self, run_dir: str | Path, start_step: int = 0, tensorboard: bool = True
                 ) -> None:
        self.run_dir = Path(run_dir)
        kept = [r for r in read_log(self.run_dir) if r.get("step", 0) <= start_step]
        if start_step == 0:
            kept = []
        atomic_write(self.run_dir / LOG_JSONL,
                     "".join(json.dumps(r) + "\n" for r in kept).encode())
        buf = io.StringIO()
        writer = csv.DictWriter(buf, CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
        atomic_write(self.run_dir / LOG_CSV, buf.getvalue().encode())
        self._jsonl = open(self.run_dir / LOG_JSONL, "a", encoding="utf-8")  # noqa: SIM115
        self._csv_file = open(self.run_dir / LOG_CSV, "a", encoding="utf-8",  # noqa: SIM115
                              newline="")
        self._csv = csv.DictWriter(self._csv_file, CSV_FIELDS, extrasaction="ignore")
        self._tb = _summary_writer(self.run_dir / TB_DIR, start_step) if tensorboard else None

    def write(self, record: dict[str, Any]) -> None:
        self._jsonl.write(json.dumps(record) + "\n")
        self._csv.writerow(record)
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._tb.add_scalar(f"train/{key}" if key != "val_loss" else "val/loss",
                                        value, record["step"])

    def flush(self, durable: bool = False) -> None:
        """Hand the records to the OS (``durable``: and to the disk, before a checkpoint)."""
        self._jsonl.flush()
        self._csv_file.flush()
        if durable:
            os.fsync(self._jsonl.fileno())
            os.fsync(self._csv_file.fileno())
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        self.flush()
        self._jsonl.close()
        self._csv_file.close()
        if self._tb is not None:
            self._tb.close()


def tensorboard_available() -> bool:
    try:
        import tensorboard  # noqa: F401  (only its presence matters)
    except ImportError:
        return False
    return True


def _summary_writer(path: Path, start_step: int):
    if not tensorboard_available():
        return None
    from torch.utils.tensorboard import SummaryWriter
    return SummaryWriter(str(path), purge_step=start_step + 1 if start_step else None)


#: off a terminal, a progress line is printed each time this many percent more are done
PLAIN_EVERY_PERCENT = 10


class PlainProgress:
    """Progress for output that is not a terminal (a log file, CI): lines that are never
    redrawn. One line each time another ``every`` percent of ``total`` is done and one per
    new stage (:meth:`set_postfix_str`); :meth:`set_postfix` values ride on the next line.
    The subset of tqdm's interface that posenc uses (``n``, ``total``, ``update``,
    ``set_postfix``, ``set_postfix_str``, ``close``)."""

    def __init__(self, total: int, *, desc: str = "", unit: str = "it", initial: int = 0,
                 file=None, every: int = PLAIN_EVERY_PERCENT) -> None:
        self.total, self.n, self.desc, self.unit = total, initial, desc, unit
        self.file, self.every = file, every
        self.postfix, self.stage = "", ""
        self.start = time.monotonic()
        self._shown = self._percent() // every
        self._printed_at: int | None = None

    def _percent(self) -> int:
        return 100 * self.n // self.total if self.total else 100

    def _line(self) -> None:
        self._printed_at = self.n
        extra = " ".join(t for t in (self.stage, self.postfix) if t)
        print(f"{self.desc}: {self._percent():3d}% ({self.n}/{self.total} {self.unit}) "
              f"{time.monotonic() - self.start:.0f}s{'  ' + extra if extra else ''}",
              file=self.file or sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._percent() // self.every > self._shown:
            self._shown = self._percent() // self.every
            self._line()

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True,
                    **values) -> None:
        values = {**(ordered_dict or {}), **values}
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        if text != self.stage:
            self.stage = text
            self._line()

    def close(self) -> None:
        if self._printed_at != self.n:
            self._line()                             # where it ended, once


def progress_bar(total: int, *, desc: str, unit: str = "it", initial: int = 0,
                 enabled: bool = True, file=None, **tqdm_options):
    """A tqdm bar when ``file`` (default stderr) is a terminal, a :class:`PlainProgress`
    when it is not (a bar redrawn into a log file writes thousands of updates), and a
    disabled tqdm bar (prints nothing) unless ``enabled``."""
    from tqdm.auto import tqdm
    stream = file or sys.stderr
    is_terminal = getattr(stream, "isatty", lambda: False)()
    if enabled and not is_terminal:
        return PlainProgress(total, desc=desc, unit=unit, initial=initial, file=file)
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not enabled,
                file=file, dynamic_ncols=True, **tqdm_options)
