"""Checks of an arena's results.json on read (``posenc plot`` and a rerun that resumes): a
file edited by hand or damaged is refused in one line naming the file and the field, except
a measured cell or point whose value is broken, which a rerun drops and measures again.

The layout is :mod:`posenc.hf.arena`'s: ``setting`` (the request), ``methods`` and
``lengths`` (what was planned), ``needle`` and ``passkey`` (method -> "length:depth index"
-> one 0/1 per needle or key), ``ppl`` (method -> length -> a perplexity point), and where
RULER's families were run ``ruler`` (family -> method -> length -> one score in [0, 1] per
sample) with ``setting.tasks``, ``setting.ruler_samples`` and ``ruler_lengths``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..study.fields import field_error, is_length, is_number
from .ruler import FAMILIES

#: what the report reads from ``setting``, and the integer bound of each (or None: a list)
SETTING_FIELDS = {"depths": None, "needles": 1, "passkey_trials": 0, "windows": 0,
                  "factor": None}


def check_arena_results(results: dict, path: Path, repair: bool = False) -> list[str]:
    """UserError naming ``path`` and the field if ``results`` cannot be an arena's; a broken
    cell or point is an error too unless ``repair``, which deletes it (so that the plan
    measures it again) and returns the names of those deleted."""
    setting = _check_frame(results, path)
    dropped: list[str] = []
    sizes = {"needle": setting["needles"], "passkey": setting["passkey_trials"]}
    for task in ("needle", "passkey", "ppl"):
        for method, cells in results[task].items():
            if not isinstance(cells, dict):
                raise field_error(path, f"{task}[{method!r}]", "must map cells to results",
                                  cells)
            for cell, value in list(cells.items()):
                field = f"{task}[{method!r}][{cell!r}]"
                if task == "ppl":
                    problem, inner, shown = _point_problem(cell, value)
                    field_shown = field + inner
                else:
                    problem = _cell_problem(cell, value, sizes[task], len(setting["depths"]))
                    field_shown, shown = field, value
                if problem is None:
                    continue
                if not repair:
                    raise field_error(path, field_shown, problem, shown)
                del cells[cell]
                dropped.append(field)
    return dropped + _check_ruler(results, path, setting, repair)


def _check_ruler(results: dict, path: Path, setting: dict, repair: bool) -> list[str]:
    """The RULER part, when present: the families, samples and cells (broken cells are
    dropped with ``repair``, as above)."""
    if "ruler" not in results or ("tasks" not in setting and results["ruler"] == {}):
        return []
    families, size = setting.get("tasks"), setting.get("ruler_samples")
    if not isinstance(families, list) or not all(f in FAMILIES for f in families):
        raise field_error(path, "setting.tasks", "must be a list of RULER tasks "
                          f"({', '.join(FAMILIES)})", families)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise field_error(path, "setting.ruler_samples", "must be an integer >= 1", size)
    lengths = results.get("ruler_lengths")
    if not isinstance(lengths, list) or not all(isinstance(n, int) and is_length(n)
                                                for n in lengths):
        raise field_error(path, "ruler_lengths", "must be a list of positive integers", lengths)
    ruler, dropped = results["ruler"], []
    if not isinstance(ruler, dict) or not all(
            f in families and isinstance(m, dict) and all(isinstance(c, dict)
                                                          for c in m.values())
            for f, m in ruler.items()):
        raise field_error(path, "ruler", "must map the setting's tasks to methods to cells",
                          ruler)
    for family, methods in ruler.items():
        for method, cells in methods.items():
            for cell, value in list(cells.items()):
                if is_length(cell) and isinstance(value, list) and len(value) == size and all(
                        isinstance(v, (int, float)) and not isinstance(v, bool)
                        and 0 <= v <= 1 for v in value):
                    continue
                field = f"ruler[{family!r}][{method!r}][{cell!r}]"
                if not repair:
                    raise field_error(path, field, f"must be a list of {size} scores in [0, 1]",
                                      value)
                del cells[cell]
                dropped.append(field)
    return dropped


def _check_frame(results: dict, path: Path) -> dict:
    """The fields every arena holds, whatever was measured; returns ``setting``."""
    setting = results.get("setting")
    if not isinstance(setting, dict):
        raise field_error(path, "setting", "must be an object", setting)
    for name, low in SETTING_FIELDS.items():
        value = setting.get(name)
        if low is not None and (isinstance(value, bool) or not isinstance(value, int)
                                or value < low):
            raise field_error(path, f"setting.{name}", f"must be an integer >= {low}", value)
    depths = setting["depths"]
    if not isinstance(depths, list) or not depths or not all(
            is_number(d) and isinstance(d, (int, float)) for d in depths):
        raise field_error(path, "setting.depths", "must be a list of numbers", depths)
    if not is_number(setting["factor"]) or not isinstance(setting["factor"], (int, float)):
        raise field_error(path, "setting.factor", "must be a number", setting["factor"])
    for name in ("lengths", "methods"):
        value = results.get(name)
        if not isinstance(value, list) or not value:
            raise field_error(path, name, "must be a non-empty list", value)
    if not all(isinstance(n, int) and is_length(n) for n in results["lengths"]):
        raise field_error(path, "lengths", "must be positive integers", results["lengths"])
    if not all(isinstance(m, str) for m in results["methods"]):
        raise field_error(path, "methods", "must be method names", results["methods"])
    for name in ("original", "native_context", "n_tokens"):
        if not is_length(results.get(name)) or not isinstance(results.get(name), int):
            raise field_error(path, name, "must be a positive integer", results.get(name))
    for name in ("needle", "passkey", "ppl"):
        if not isinstance(results.get(name), dict):
            raise field_error(path, name, "must map methods to their results",
                              results.get(name))
    return setting


def _cell_problem(cell: Any, value: Any, size: int, depths: int) -> str | None:
    """What is wrong with a needle or passkey cell ``cell: value``, or None."""
    length, _, depth = str(cell).partition(":")
    if not is_length(length) or not depth.isdigit() or int(depth) >= depths:
        return "is not a cell 'length:depth index' of the setting"
    if not isinstance(value, list) or len(value) != size:
        return f"must be a list of {size} hits (0 or 1)"
    if any(isinstance(v, bool) or v not in (0, 1) for v in value):
        return f"must be a list of {size} hits (0 or 1)"
    return None


def _point_problem(length: Any, point: Any) -> tuple[str | None, str, Any]:
    """(what is wrong or None, the field below the point, its value) for a perplexity point
    ``length: point``."""
    if not is_length(length):
        return "is not a length", "", length
    if not isinstance(point, dict):
        return "must be a perplexity point (an object)", "", point
    for name in ("ppl", "nll"):
        if not is_number(point.get(name)) or point.get(name) is None:
            return "must be a number", f".{name}", point.get(name, "(missing)")
    nll, tokens = point.get("window_nll"), point.get("window_tokens")
    if not isinstance(nll, list) or not nll or not all(_is_float(v) for v in nll):
        return "must be a non-empty list of numbers", ".window_nll", nll
    if not isinstance(tokens, list) or len(tokens) != len(nll) or not all(
            is_length(t) and isinstance(t, int) for t in tokens):
        return "must hold one positive integer per window", ".window_tokens", tokens
    return None, "", point


def _is_float(value: Any) -> bool:
    """A number as results.json holds it (non-finite ones as strings)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or \
        value in ("inf", "-inf", "nan")
