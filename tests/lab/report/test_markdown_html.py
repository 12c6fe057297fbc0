"""index.html renders the whole report: tables, verdicts and lists as HTML, not raw
markdown; checked as text and, where Chromium is installed, as a browser parses it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from posenc.lab.report.markdown_html import markdown_to_html
from posenc.lab.report.report import render_index, render_report
from tests.helpers import chromium_or_skip, run_headless
from tests.lab.helpers import results


class _Text(HTMLParser):
    """Visible text and the tags of an HTML document."""

    def __init__(self) -> None:
        super().__init__()
        self.text, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _tables(markdown: str) -> int:
    return sum(line.startswith("|---|") for line in markdown.splitlines())


def _parse(page: str) -> _Text:
    parser = _Text()
    parser.feed(page)
    return parser


def test_the_subset_becomes_tags():
    body = markdown_to_html("# Title\n\nA **bold** `code` [link](a.html) < b.\n\n"
                            "| a | b |\n|---|---|\n| 1 | **x** |\n\n- one\n- two\n\n"
                            "1. **first**: ok.\n   Rule: r.\n2. second\n\n![fig](f.png)\n",
                            {"f.png": "A caption."})
    assert "<h1>Title</h1>" in body and "<strong>bold</strong>" in body
    assert "<code>code</code>" in body and '<a href="a.html">link</a>' in body
    assert "&lt; b." in body
    assert "<thead><tr><th>a</th><th>b</th></tr></thead>" in body
    assert "<td><strong>x</strong></td>" in body
    assert "<ul><li>one</li><li>two</li></ul>" in body
    assert "<ol><li><strong>first</strong>: ok.<br>Rule: r.</li><li>second</li></ol>" in body
    assert '<img src="f.png" alt="fig"><figcaption>A caption.</figcaption>' in body


def test_index_html_holds_the_whole_report_without_raw_markdown():
    r = results()
    page = render_index(r, ["ppl_vs_length.png"])
    parsed = _parse(page)
    text = "".join(parsed.text)
    assert parsed.tags.count("table") == _tables(render_report(r))
    assert "Published claims, checked on this run" in text and "provisional" in text
    assert "|---|" not in text and "**" not in text and not re.search(r"^#+ ", text, re.M)



def test_index_html_renders_its_tables_in_chromium(tmp_path):
    browser = chromium_or_skip()
    r = results()
    page = tmp_path / "index.html"
    page.write_text(render_index(r, []))
    dom = run_headless(browser, tmp_path, "--dump-dom", page.as_uri(), text=True,
                       timeout=120).stdout
    parsed = _parse(dom)
    assert parsed.tags.count("table") == _tables(render_report(r)) >= 5
    assert parsed.tags.count("td") > 100 and "supported" in "".join(parsed.text)
