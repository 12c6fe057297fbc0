"""Redraw a finished comparison's figures, report.md and index.html from its results.json.

Nothing is trained or evaluated, and results.json is not rewritten: restyled plots or a
newer report format apply to old comparisons in seconds (``posenc plot DIR``). A
hand-edited or damaged results.json is refused in one line naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import UserError
from ...study import RESULTS, RunDirectory
from ...study.fields import field_error, is_length, is_number
from ...viz.plots import plot_all
from .report import existing_links, render_index, render_report

#: per-length fields of a comparison's run (and of each of its seeds): {length: number}
LENGTH_FIELDS = ("ppl", "ppl_spread", "ratio_spread")


def check_comparison_numbers(results: dict, path: Path) -> None:
    """UserError naming ``path`` and the field if a length or a value that the figures draw
    is not a number."""
    def check_map(field: str, mapping) -> None:
        if mapping is None:
            return
        if not isinstance(mapping, dict):
            raise field_error(path, field, "must map lengths to numbers", mapping)
        for length, value in mapping.items():
            if not is_length(length):
                raise field_error(path, field, "has a length that is not a positive integer",
                                  length)
            if not is_number(value):
                raise field_error(path, f"{field}[{length!r}]", "is not a number", value)

    for i, run in enumerate(results.get("runs") or []):
        if not isinstance(run, dict):
            raise field_error(path, f"runs[{i}]", "must be an object", run)
        if "train_len" in run and not is_length(run["train_len"]):
            raise field_error(path, f"runs[{i}].train_len", "is not a positive integer",
                              run["train_len"])
        for name in LENGTH_FIELDS:
            check_map(f"runs[{i}].{name}", run.get(name))
        for j, seed in enumerate(run.get("seeds") or []):
            check_map(f"runs[{i}].seeds[{j}].ppl",
                      seed.get("ppl") if isinstance(seed, dict) else seed)


def redraw_comparison(results: dict, directory: RunDirectory,
                      changed: list[str] | None = None) -> list[Path]:
    """The PNGs, report.md and index.html of a ``posenc compare`` directory; returns paths.
    ``changed``: the settings that differ from the comparison's preset."""
    check_comparison_numbers(results, directory.path / RESULTS)
    if not results.get("runs"):
        raise UserError(f"{directory.path / RESULTS} holds no finished run to draw")
    plots = plot_all(results, directory.path)
    names = [p.name for p in plots]
    links = existing_links(directory.path)
    text = render_report(results, names, links, changed)
    return [*plots, directory.write("report.md", text),
            directory.write("index.html", render_index(results, names, links, report=text))]
