"""Progress of a study: a bar on a terminal, a line per finished unit elsewhere.

On a terminal the bar redraws in place with the time left. Off a terminal (a log file, CI) a
redrawn bar writes thousands of updates; there one line is printed per finished unit of work
instead, with the share done, the time so far and the estimated time left.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class StudyProgress:
    """``advance(n)`` moves ``n`` of ``total`` work; ``stage(text)`` names the current unit;
    ``unit_done(text)`` ends one. ``enabled=False`` prints nothing."""

    def __init__(self, total: int, desc: str, enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.total, self.desc, self.enabled = max(1, int(total)), desc, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.started = time.perf_counter()
        self.bar = None
        if enabled and _is_terminal(self.stream):
            from tqdm.auto import tqdm
            self.bar = tqdm(total=self.total, desc=desc, dynamic_ncols=True, file=self.stream,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}"
                                       " {postfix}")

    def advance(self, n: int) -> None:
        n = max(0, int(n))
        self.done = min(self.total, self.done + n)
        if self.bar is not None:
            self.bar.update(n)

    def stage(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    def unit_done(self, text: str) -> None:
        """One line off a terminal: ``desc: 42% text (01:10 so far, about 01:37 left)``."""
        if not self.enabled or self.bar is not None:
            return
        elapsed = time.perf_counter() - self.started
        share = self.done / self.total
        left = f", about {_clock(elapsed * (1 - share) / share)} left" if 0 < share < 1 else ""
        print(f"{self.desc}: {100 * share:3.0f}% {text} ({_clock(elapsed)} so far{left})",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
