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
