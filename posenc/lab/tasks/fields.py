"""Checks of a task study's results.json on read (``posenc plot`` and a rerun that resumes):
a file edited by hand or damaged is refused in one line naming the file and the field,
except a run whose entry is broken, which a rerun drops and trains again.

The layout is :mod:`posenc.lab.tasks.study`'s: ``config`` (a TaskStudyConfig as a dict) and
``runs``, one entry per (part, task, encoding, seed) with its scores per length
(``lengths``: length -> ``token_accuracy``, ``exact_match``, ``n_examples``, ``note``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import UserError
from ...study.fields import field_error, is_length
from .presets import TaskStudyConfig

PARTS = ("lm", "seq2seq")
#: how results.json spells a loss that diverged
NON_FINITE = ("inf", "-inf", "nan")


def check_task_results(results: dict, path: Path, repair: bool = False) -> list[str]:
    """UserError naming ``path`` and the field if ``results`` cannot be a task study's; a
    broken run is an error too unless ``repair``, which deletes it (so that the plan trains
    it again) and returns the names of those deleted."""
    config = results.get("config")
    if not isinstance(config, dict):
        raise field_error(path, "config", "must be an object (the study's settings)", config)
    try:
        TaskStudyConfig.from_dict(config)
    except UserError as err:
        raise UserError(f"{path}: config is not a task study's settings ({err}); fix or "
                        "regenerate the file") from None
    runs = results.get("runs")
    if not isinstance(runs, list):
        raise field_error(path, "runs", "must be a list of runs", runs)
    kept, dropped = [], []
    for i, run in enumerate(runs):
        problem = _run_problem(run)
        if problem is None:
            kept.append(run)
            continue
        field, what, value = problem
        if not repair:
            raise field_error(path, f"runs[{i}]{field}", what, value)
        dropped.append(f"runs[{i}]{field}")
    runs[:] = kept
    return dropped


def _run_problem(run: Any) -> tuple[str, str, Any] | None:
    """(field below the run, what is wrong, its value) for a broken run entry, or None."""
    if not isinstance(run, dict):
        return "", "must be an object", run
    if run.get("part") not in PARTS:
        return ".part", f"must be one of {', '.join(PARTS)}", run.get("part")
    for name in ("task", "encoding"):
        if not isinstance(run.get(name), str):
            return f".{name}", "must be a name", run.get(name)
    seed = run.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        return ".seed", "must be an integer >= 0", seed
    if not (isinstance(run.get("train_len"), int) and is_length(run.get("train_len"))):
        return ".train_len", "must be a positive integer", run.get("train_len")
    if not (_is_float(run.get("final_loss")) or run.get("final_loss") in NON_FINITE):
        return ".final_loss", "must be a number", run.get("final_loss")
    if not isinstance(run.get("seconds"), dict):
        return ".seconds", "must be an object", run.get("seconds")
    lengths = run.get("lengths")
    if not isinstance(lengths, dict) or not lengths:
        return ".lengths", "must map lengths to scores", lengths
    for length, cell in lengths.items():
        field = f".lengths[{length!r}]"
        if not is_length(length):
            return field, "is not a length", length
        if not isinstance(cell, dict):
            return field, "must be an object of scores", cell
        for name in ("token_accuracy", "exact_match"):
            value = cell.get(name)
            if value is not None and not (_is_float(value) and 0 <= value <= 1):
                return f"{field}.{name}", "must be a number in [0, 1] or null", value
        n = cell.get("n_examples")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            return f"{field}.n_examples", "must be an integer >= 0", n
    return None


def _is_float(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
