"""Reports, pages and figures are written with posenc.runio's atomic helper: a crash while
writing leaves the previous file whole, and no writer in the package bypasses the helper."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from matplotlib.figure import Figure

import posenc
from posenc.atlas.pages import write_html, write_markdown
from posenc.runio import TMP_SUFFIX
from posenc.study import RunDirectory, StudyKind
from posenc.viz.axes import save_png

PACKAGE = Path(posenc.__file__).parent
#: the files that may write without posenc.runio, and why
DIRECT_WRITERS = {
    "runio.py": "the helper itself",
    "viz/axes.py": "save_png: matplotlib writes into the helper's temporary file",
    "train/logging.py": "append-only training logs; readers skip a torn last line",
    "hf/measure.py": "writes /proc/self/clear_refs, not a file",
    "kernels/build.py": "the C source, into a temporary build folder",
}
WRITE_CALL = re.compile(r"\.savefig\(|\.write_text\(|\.write_bytes\(|\bopen\([^)]*[\"'][wax]")


def _figure(color: str) -> Figure:
    fig = Figure(figsize=(2, 2), dpi=50)
    fig.subplots().plot([0, 1], [0, 1], color=color)
    return fig


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(TMP_SUFFIX)]


def test_a_figure_that_fails_halfway_leaves_the_old_png_whole(tmp_path, monkeypatch):
    path = save_png(_figure("red"), tmp_path / "plot.png")
    before = path.read_bytes()
    assert before.startswith(b"\x89PNG")

    def torn(self, fname, **kwargs):
        fname.write(b"\x89PNG half an image")
        raise RuntimeError("killed while drawing")

    monkeypatch.setattr(Figure, "savefig", torn)
    with pytest.raises(RuntimeError, match="killed"):
        save_png(_figure("blue"), path)
    assert path.read_bytes() == before and _leftovers(tmp_path) == []


def test_reports_and_pages_are_renamed_into_place(tmp_path, monkeypatch):
    renamed = []
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        renamed.append(Path(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    directory = RunDirectory(tmp_path, StudyKind("toy", 1, "posenc toy", ("report.md",)))
    written = [
        directory.write("report.md", "# report\n"),
        directory.write("index.html", "<html></html>"),
        directory.write("tasks.md", "# tasks\n"),
        write_html(tmp_path, []),
        write_markdown(tmp_path, []),
        save_png(_figure("red"), tmp_path / "plot.png"),
    ]
    assert [p.name for p in written] == ["report.md", "index.html", "tasks.md", "index.html",
                                         "index.md", "plot.png"]
    assert all(p in renamed and p.stat().st_size > 0 for p in written)
    assert _leftovers(tmp_path) == []


def test_no_module_writes_files_around_the_helper():
    direct = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        hits = [n for n, line in enumerate(path.read_text().splitlines(), 1)
                if WRITE_CALL.search(line)]
        if hits:
            direct[path.relative_to(PACKAGE).as_posix()] = hits
    assert set(direct) <= set(DIRECT_WRITERS), {k: v for k, v in direct.items()
                                                if k not in DIRECT_WRITERS}
