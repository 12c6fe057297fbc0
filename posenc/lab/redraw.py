"""Redraw a finished comparison's figures, report.md and index.html from its results.json.

Nothing is trained or evaluated, and results.json is not rewritten: restyled plots or a
newer report format apply to old comparisons in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError
from ..viz.plots import plot_all
from .report import write_index, write_report
from ..study import read_study_results
from .results import COMPARE_KIND, RESULTS


def read_any_results(out_dir: Path) -> dict:
    """results.json of ``out_dir`` (any posenc study); FileNotFoundError / ValueError."""
    path = Path(out_dir) / RESULTS
    if not Path(out_dir).is_dir():
        raise FileNotFoundError(f"{out_dir} is not a directory")
    if not path.exists():
        raise FileNotFoundError(f"{out_dir} holds no {RESULTS}; pass the --out directory of "
                                "`posenc compare` or `posenc extend`")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a posenc results file")
    return data


def redraw_comparison(out_dir: Path) -> list[Path]:
    """The PNGs, report.md and index.html of a ``posenc compare`` directory; returns paths."""
    out_dir = Path(out_dir)
    _, results = read_study_results(out_dir, (COMPARE_KIND,))
    if not results["runs"]:
        raise UserError(f"{out_dir}/{RESULTS} holds no finished run to draw")
    plots = plot_all(results, out_dir)
    names = [p.name for p in plots]
    return [*plots, write_report(results, out_dir, names), write_index(results, out_dir, names)]
