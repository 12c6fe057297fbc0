"""Progress off a terminal: plain lines, a bounded number of them (one per 10 percent and one
per stage), never a redrawn bar; on a terminal, tqdm's bar; nothing when disabled."""

from __future__ import annotations

import io

from posenc.train.logging import PlainProgress, progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_progress_is_a_line_per_ten_percent():
    out = io.StringIO()
    bar = progress_bar(1000, desc="train rope", unit="step", file=out)
    assert isinstance(bar, PlainProgress)
    for step in range(1000):
        bar.update(1)
        bar.set_postfix(loss=f"{1 / (step + 1):.3f}", refresh=False)   # as train calls it
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 10
    assert lines[0].startswith("train rope:  10% (100/1000 step)")
    assert lines[-1].startswith("train rope: 100% (1000/1000 step)")
    assert lines[-1].endswith("loss=0.001")


def test_each_new_stage_is_a_line_and_close_reports_where_it_ended():
    out = io.StringIO()
    bar = progress_bar(50, desc="compare", initial=5, file=out)
    for stage in ("train rope", "train rope", "eval rope seed 0"):
        bar.set_postfix_str(stage)
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("compare:  10% (5/50 it)") and lines[0].endswith("train rope")
    assert lines[1].endswith("eval rope seed 0")
    assert lines[2].startswith("compare:  16% (8/50 it)")


def test_on_a_terminal_it_is_tqdms_bar_and_disabled_it_prints_nothing():
    from tqdm import tqdm
    term = Terminal()
    bar = progress_bar(10, desc="x", file=term)
    assert isinstance(bar, tqdm)
    bar.close()
    quiet = io.StringIO()
    bar = progress_bar(10, desc="x", enabled=False, file=quiet)
    bar.update(10)
    bar.close()
    assert quiet.getvalue() == ""
