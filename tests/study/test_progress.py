"""The progress of a study: the time left follows the recent rate (a clock injected, no real
time), and off a terminal a long first unit shows a line with an estimate before it ends."""

from __future__ import annotations

import io
import re

import pytest

from posenc.study.progress import RecentRate, StudyProgress


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _left_seconds(line: str) -> int:
    minutes, seconds = re.search(r"about (\d+):(\d\d) left", line).groups()
    return 60 * int(minutes) + int(seconds)


def test_the_time_left_follows_the_recent_rate_when_the_machine_slows_down():
    """20 quick units (1 s each) then 5 slow ones (10 s each, the machine got busy): the
    mean since the start would say 2.8 s per unit, 210 s for the last 75; the estimate says
    about 10 s per unit."""
    clock = FakeClock()
    bar = StudyProgress(100, "study", enabled=False, clock=clock)
    assert bar.seconds_left() is None                      # nothing done yet
    for _ in range(20):
        clock.now += 1.0
        bar.advance(1)
    assert bar.seconds_left() == pytest.approx(80.0)       # a steady rate is kept exactly
    for _ in range(5):
        clock.now += 10.0
        bar.advance(1)
    assert 7.5 * 75 < bar.seconds_left() <= 10.0 * 75
    for _ in range(5):                                     # and it recovers when it is quiet
        clock.now += 1.0
        bar.advance(1)
    assert bar.seconds_left() < 3.0 * 70


def test_a_record_of_many_units_weighs_as_much_as_as_many_single_records():
    one, many = RecentRate(0.0), RecentRate(0.0)
    one.record(10.0, 10)                                   # 1 s per unit
    many.record(10.0, 10)
    for t in range(1, 5):
        one.record(10.0 + 5 * t, 1)                        # then 5 s per unit, one by one
    many.record(30.0, 4)                                   # or all four at once
    assert one.seconds_left(10) == pytest.approx(many.seconds_left(10))
    with pytest.raises(ValueError):
        RecentRate(0.0, smoothing=0.0)


def test_off_a_terminal_a_long_first_unit_prints_its_estimate_before_it_ends():
    clock, stream = FakeClock(), io.StringIO()
    bar = StudyProgress(10, "extend", stream=stream, interval=30.0, clock=clock)
    bar.stage("none perplexity at 512")
    assert stream.getvalue() == ("extend:   0% none perplexity at 512 (00:00 so far, time "
                                 "left after the first step)\n")
    clock.now += 20.0
    bar.advance(1)                                         # inside the interval: quiet
    assert len(stream.getvalue().splitlines()) == 1
    clock.now += 20.0
    bar.advance(1)                                         # 40 s in, 2 of 10 done
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("extend:  20% none perplexity at 512 "
                                                   "(00:40 so far, about 02:")
    assert _left_seconds(lines[1]) == 160                  # 20 s per window, 8 left
    clock.now += 1.0
    bar.advance(1)                                         # a line at most every 30 s
    assert len(stream.getvalue().splitlines()) == 2


def test_on_a_terminal_the_bar_shows_the_stage_and_the_time_left():
    clock, stream = FakeClock(), io.StringIO()
    bar = StudyProgress(4, "extend", stream=stream, clock=clock, terminal=True)
    bar.stage("none perplexity at 512")
    clock.now += 3.0
    bar.advance(1)
    bar.stage("none perplexity at 1024")
    bar.close()
    assert "none perplexity at 1024, about 00:09 left" in stream.getvalue()
