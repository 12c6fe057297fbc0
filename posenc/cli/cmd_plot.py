"""``posenc plot DIR``: redraw the figures of a ``compare`` or ``extend`` output directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserError

NAME = "plot"
HELP = ("redraw the figures (and report) of a `posenc compare` or `posenc extend` output "
        "directory from its results.json, without training or evaluating")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="output directory of `posenc compare` or `posenc extend`")


def _floats(obj):
    """``obj`` with the strings results.json uses for non-finite numbers made floats again."""
    if isinstance(obj, dict):
        return {k: _floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_floats(v) for v in obj]
    return float(obj) if obj in ("inf", "-inf", "nan") else obj


#: per-length fields of a comparison's run (and of each of its seeds): {length: number}
LENGTH_FIELDS = ("ppl", "ppl_spread", "ratio_spread")


def _is_number(value) -> bool:
    """A value the figures can draw or skip: a number, None, a non-finite number as
    results.json spells it, or the note of a length a model could not serve ("n/a (...)")."""
    if isinstance(value, bool):
        return False
    return (value is None or isinstance(value, (int, float))
            or value in ("inf", "-inf", "nan")
            or (isinstance(value, str) and value.startswith("n/a")))


def _is_length(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        return int(value) >= 1 and str(int(value)) == str(value).strip()
    except (TypeError, ValueError):
        return False


def check_numbers(results: dict, path: Path) -> None:
    """UserError naming ``path`` and the field if a length or a value that the figures draw
    is not a number (a hand-edited or damaged results.json)."""
    def bad(field: str, what: str, value) -> UserError:
        return UserError(f"{path}: {field} {what}, got {value!r}; fix or regenerate the file")

    def check_map(field: str, mapping) -> None:
        if mapping is None:
            return
        if not isinstance(mapping, dict):
            raise bad(field, "must map lengths to numbers", mapping)
        for length, value in mapping.items():
            if not _is_length(length):
                raise bad(field, "has a length that is not a positive integer", length)
            if not _is_number(value):
                raise bad(f"{field}[{length!r}]", "is not a number", value)

    for i, run in enumerate(results.get("runs") or []):
        if not isinstance(run, dict):
            raise bad(f"runs[{i}]", "must be an object", run)
        if "train_len" in run and not _is_length(run["train_len"]):
            raise bad(f"runs[{i}].train_len", "is not a positive integer", run["train_len"])
        for name in LENGTH_FIELDS:
            check_map(f"runs[{i}].{name}", run.get(name))
        for j, seed in enumerate(run.get("seeds") or []):
            check_map(f"runs[{i}].seeds[{j}].ppl", seed.get("ppl") if isinstance(seed, dict)
                      else seed)
    methods = results.get("methods")
    for name, row in (methods.items() if isinstance(methods, dict) else ()):
        for k, point in enumerate((row or {}).get("ppl") or []):
            field = f"methods[{name!r}].ppl[{k}]"
            if not isinstance(point, dict):
                raise bad(field, "must be an object with length and ppl", point)
            if not _is_length(point.get("length")):
                raise bad(f"{field}.length", "is not a positive integer", point.get("length"))
            if not _is_number(point.get("ppl")):
                raise bad(f"{field}.ppl", "is not a number", point.get("ppl"))


def _redraw_extension(results: dict, out: Path) -> list[Path]:
    """ppl.png and passkey_<method>.png of a `posenc extend` directory, drawn by hf.report."""
    from ..hf.report import _safe, plot_passkey, plot_ppl
    results = _floats(results)
    paths = [plot_ppl(results, out / "ppl.png")]
    for name, row in results["methods"].items():
        if row.get("passkey") is not None:
            paths.append(plot_passkey(name, row["passkey"], out / f"passkey_{_safe(name)}.png"))
    return paths


def run(args: argparse.Namespace) -> int:
    from ..lab.redraw import read_any_results, redraw_comparison
    out = Path(args.dir)
    results = read_any_results(out)
    check_numbers(results, out / "results.json")
    if "methods" in results and "config" in results:
        paths = _redraw_extension(results, out)
    elif {"config", "corpus", "runs"} <= set(results):
        paths = redraw_comparison(out)
    else:
        raise UserError(f"{out}/results.json is neither a `posenc compare` nor a "
                         "`posenc extend` result")
    for path in paths:
        print(f"wrote {path}")
    return 0
