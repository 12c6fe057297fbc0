"""HTML for the subset of markdown the lab's reports write, so index.html shows the whole
report (tables, verdicts) in a browser, which shows report.md only as raw text.

The subset: ``#`` .. ``####`` headings, paragraphs (consecutive lines), pipe tables (a header
row, a ``|---|`` separator, rows), bullet lists (``- ``), numbered lists (``1. ``, with
indented continuation lines), images on their own line ``![alt](src)``, and inline
``**bold**``, ```code``` and ``[text](href)``. Everything else is escaped text.
"""

from __future__ import annotations

import html
import re

_INLINE = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`|\[([^\]]+)\]\(([^)\s]+)\)")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)$")
_NUMBERED = re.compile(r"^(\d+)\. (.*)$")
_HEADING = re.compile(r"^(#{1,4}) (.*)$")
_TABLE_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")


def inline(text: str) -> str:
    """Escaped ``text`` with bold, code and links turned into tags."""
    out, last = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[last:m.start()]))
        if m.group(1) is not None:
            out.append(f"<strong>{inline(m.group(1))}</strong>")
        elif m.group(2) is not None:
            out.append(f"<code>{html.escape(m.group(2))}</code>")
        else:
            out.append(f'<a href="{html.escape(m.group(4))}">{inline(m.group(3))}</a>')
        last = m.end()
    return "".join(out) + html.escape(text[last:])


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(lines: list[str]) -> str:
    head, rows = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    th = "".join(f"<th>{inline(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def markdown_to_html(text: str, captions: dict[str, str] | None = None) -> str:
    """The HTML body (no ``<html>`` wrapper) of a report written in the subset above; an
    image's caption is ``captions[src]`` when given, else its alt text."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        heading, image = _HEADING.match(line), _IMAGE.match(line.strip())
        if heading:
            level = len(heading.group(1))
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
            i += 1
        elif image:
            alt, src = image.groups()
            caption = (captions or {}).get(src, alt)
            out.append(f'<figure><img src="{html.escape(src)}" alt="{html.escape(alt)}">'
                       f"<figcaption>{html.escape(caption)}</figcaption></figure>")
            i += 1
        elif line.startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_table(lines[i:j]))
            i = j
        elif line.startswith("- ") or _NUMBERED.match(line):
            tag = "ul" if line.startswith("- ") else "ol"
            items = []
            while i < len(lines) and (lines[i].startswith("- ") if tag == "ul"
                                      else _NUMBERED.match(lines[i])):
                item = [lines[i][2:] if tag == "ul" else _NUMBERED.match(lines[i]).group(2)]
                i += 1
                while i < len(lines) and lines[i].startswith("   ") and lines[i].strip():
                    item.append(lines[i].strip())
                    i += 1
                items.append("<li>" + "<br>".join(inline(x) for x in item) + "</li>")
            out.append(f"<{tag}>{''.join(items)}</{tag}>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not (
                    _HEADING.match(lines[i]) or lines[i].startswith(("|", "- "))
                    or _NUMBERED.match(lines[i]) or _IMAGE.match(lines[i].strip())):
                para.append(lines[i].strip())
                i += 1
            out.append("<p>" + " ".join(inline(x) for x in para) + "</p>")
    return "\n".join(out)


STYLE = ("body{font-family:sans-serif;max-width:72rem;margin:1rem auto;padding:0 1rem}"
         "table{border-collapse:collapse;margin:.5rem 0}th,td{border:1px solid #bbb;"
         "padding:.2rem .5rem;text-align:left}th{background:#eee}img{max-width:100%}"
         "code{background:#f3f3f3}")


def html_page(title: str, body: str) -> str:
    """A self-contained HTML page around ``body``."""
    return "\n".join(["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
                      f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
                      body, "</body></html>", ""])
