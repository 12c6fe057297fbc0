"""The atlas pages: ``index.html`` (self-contained: images linked relatively, styles
inline, no scripts, opens offline) and ``index.md``, one section per panel with its figures
and caption."""

from __future__ import annotations

import html
from pathlib import Path

from ..runio import atomic_write
from .figure import Panel

TITLE = "posenc atlas: what each positional encoding does"
INTRO = (
    "Each panel below draws one idea about positional encodings from the library's own "
    "functions, without training; the numbers behind every figure are in atlas.json under "
    "the panel's name.")
RUN_INTRO = "The last panels come from the trained run {run}."

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1400px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.7em; } h2 { font-size: 1.3em; margin-top: 2em; border-bottom: 1px solid #ddd; }
img { max-width: 100%; height: auto; display: block; margin: 0.8em 0; }
p.caption { max-width: 75em; } code { background: #f3f3f3; padding: 0 0.2em; }
nav li { margin: 0.15em 0; }
"""


def write_html(out_dir: Path, panels: list[Panel], run: str | None = None) -> Path:
    """Write ``out_dir/index.html`` for ``panels`` (atomically) and return its path."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(TITLE)}</title>", f"<style>{_STYLE}</style></head><body>",
             f"<h1>{html.escape(TITLE)}</h1>", f"<p>{html.escape(INTRO)}</p>"]
    if run:
        parts.append(f"<p>{html.escape(RUN_INTRO.format(run=run))}</p>")
    parts.append("<nav><ol>")
    parts += [f'<li><a href="#{p.name}">{html.escape(p.title)}</a></li>' for p in panels]
    parts.append("</ol></nav>")
    for p in panels:
        parts.append(f'<section id="{p.name}"><h2>{html.escape(p.title)}</h2>')
        for image in p.images:
            parts.append(f'<img src="{html.escape(image)}" alt="{html.escape(p.title)}">')
        parts.append(f'<p class="caption">{_inline_code(p.caption)} '
                     f'<small>(numbers: <code>atlas.json["{p.name}"]</code>)</small></p>')
        parts.append("</section>")
    parts.append("</body></html>")
    path = Path(out_dir) / "index.html"
    atomic_write(path, ("\n".join(parts) + "\n").encode("utf-8"))
    return path


def _inline_code(text: str) -> str:
    """HTML-escape ``text`` and turn `backquoted` spans into <code>."""
    pieces = html.escape(text).split("`")
    return "".join(f"<code>{piece}</code>" if i % 2 else piece for i, piece in enumerate(pieces))


def write_markdown(out_dir: Path, panels: list[Panel], run: str | None = None) -> Path:
    """Write ``out_dir/index.md`` for ``panels`` (atomically) and return its path."""
    lines = [f"# {TITLE}", "", INTRO, ""]
    if run:
        lines += [RUN_INTRO.format(run=run), ""]
    for p in panels:
        lines += [f"## {p.title}", ""]
        lines += [f"![{p.title}]({image})" for image in p.images]
        lines += ["", f"{p.caption} (numbers: `atlas.json[\"{p.name}\"]`)", ""]
    path = Path(out_dir) / "index.md"
    atomic_write(path, "\n".join(lines).encode("utf-8"))
    return path
