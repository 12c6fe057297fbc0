"""What ``posenc extend`` writes (its :class:`~posenc.study.StudyKind`: outputs, the
schema-0 results of an older posenc recognised but not resumed) and how its report and
figures are drawn, and redrawn by ``posenc plot``, from results.json alone."""

from __future__ import annotations

from pathlib import Path

from ..study import RESULTS, RunDirectory, StudyKind, decode, register_kind
from ..study.placement import placement_markdown
from .report import check_extension_numbers, passkey_figure, report_markdown, write_figures


def _legacy(data: dict) -> bool:
    """A results.json ``posenc extend`` wrote before kinds were stamped."""
    return (isinstance(data.get("methods"), dict) and isinstance(data.get("config"), dict)
            and "n_tokens" in data)


def _migrate(data: dict, schema: int) -> dict:
    """Schema 0 (finished studies only, no recorded settings): rows kept, nothing resumable."""
    return {**data, "setting": None, "partial": {}, "notes": data.get("notes", [])}


def render_extension(results: dict, directory: RunDirectory, final: bool = True
                     ) -> list[Path]:
    """report.md, and when ``final`` the perplexity plot and the passkey heat maps."""
    paths = [directory.path / RESULTS,
             directory.write("report.md", report_markdown(results) + placement_markdown(results))]
    if final:
        paths += write_figures(results, directory)
    return paths


def redraw_extension(results: dict, directory: RunDirectory) -> list[Path]:
    """``posenc plot``: report.md and the figures again from a results.json (checked)."""
    check_extension_numbers(results, directory.path / RESULTS)
    return render_extension(decode(results), directory)[1:]


def passkey_figures(results: dict) -> list[str]:
    """The passkey heat map of every method row of ``results``, by exact name."""
    return [passkey_figure(name) for name in results.get("methods") or {}]


EXTEND_KIND = register_kind(StudyKind(
    name="extend", schema=1, command="posenc extend",
    outputs=(RESULTS, "report.md", "ppl.png", "measurements.json"),
    legacy=_legacy, migrate=_migrate, description="posenc extend study",
    redraw=lambda results, directory: redraw_extension(results, directory),
    named_outputs=passkey_figures))
