"""Progress of a study: a bar on a terminal, lines elsewhere, both with the time left.

On a terminal the bar redraws in place. Off a terminal (a log file, CI) a redrawn bar writes
thousands of updates; there a line is printed when the first unit starts, at most every
``interval`` seconds while a unit runs (so a long first unit shows its estimate before it
ends), and once per finished unit: the share done, the time so far and the estimated time
left.

The time left follows the recent rate (:class:`RecentRate`), not the mean since the start: on
a shared machine whose load changes during a run, the mean keeps promising the speed of a
quiet start long after the machine got busy.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class RecentRate:
    """Seconds per unit of work, exponentially weighted towards the recent past.

    ``record(now, n)`` says ``n`` units were done by time ``now``; each record's seconds per
    unit (the time since the previous record over ``n``) enters the average with weight
    ``1 - (1 - smoothing) ** n``, so a record of much work weighs as much as as many records
    of one unit. ``seconds_left(remaining)`` is None until something was recorded."""

    def __init__(self, start: float, smoothing: float = 0.3) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.last, self.smoothing = start, smoothing
        self.per_unit: float | None = None

    def record(self, now: float, n: int) -> None:
        if n <= 0:
            return
        sample = max(0.0, now - self.last) / n
        self.last = now
        if self.per_unit is None:
            self.per_unit = sample
        else:
            weight = 1 - (1 - self.smoothing) ** n
            self.per_unit += weight * (sample - self.per_unit)

    def seconds_left(self, remaining: int) -> float | None:
        return None if self.per_unit is None else self.per_unit * max(0, remaining)


class StudyProgress:
    """``advance(n)`` moves ``n`` of ``total`` work; ``stage(text)`` names the current unit;
    ``unit_done(text)`` ends one. ``enabled=False`` prints nothing; ``clock`` (seconds)
    and ``terminal`` (None: ask the stream) are for tests."""

    def __init__(self, total: int, desc: str, enabled: bool = True,
                 stream: TextIO | None = None, *, interval: float = 30.0,
                 clock: Callable[[], float] = time.perf_counter,
                 terminal: bool | None = None) -> None:
        self.total, self.desc, self.enabled = max(1, int(total)), desc, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.interval, self.clock = interval, clock
        self.done = 0
        self.started = clock()
        self.rate = RecentRate(self.started)
        self.label = ""
        self.printed_at = self.started
        self.bar = None
        on_terminal = _is_terminal(self.stream) if terminal is None else terminal
        if enabled and on_terminal:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=self.total, desc=desc, dynamic_ncols=True, file=self.stream,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} {postfix}")

    def seconds_left(self) -> float | None:
        """The estimated time left at the recent rate (None before any work is done)."""
        return self.rate.seconds_left(self.total - self.done)

    def advance(self, n: int) -> None:
        n = max(0, int(n))
        n = min(n, self.total - self.done)
        self.done += n
        self.rate.record(self.clock(), n)
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_postfix_str(self._postfix(), refresh=False)
        elif self.enabled and n and self.clock() - self.printed_at >= self.interval:
            self._line(self.label)

    def stage(self, text: str) -> None:
        first = not self.label
        self.label = text
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(), refresh=True)
        elif self.enabled and first:
            self._line(text)

    def unit_done(self, text: str) -> None:
        """One line off a terminal: ``desc: 42% text (01:10 so far, about 01:37 left)``."""
        if self.enabled and self.bar is None:
            self._line(text)

    def _left(self) -> str:
        left = self.seconds_left()
        if self.done >= self.total:
            return ""
        return f"about {_clock(left)} left" if left is not None else "time left after the " \
            "first step"

    def _postfix(self) -> str:
        left = self._left()
        return f"{self.label}, {left}" if left else self.label

    def _line(self, text: str) -> None:
        now = self.clock()
        self.printed_at = now
        left = self._left()
        print(f"{self.desc}: {100 * self.done / self.total:3.0f}% {text} "
              f"({_clock(now - self.started)} so far" + (f", {left})" if left else ")"),
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
