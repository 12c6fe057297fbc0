"""Timing and memory helpers shared by the benchmark scripts.

Every figure in BENCHMARKS.md is a ratio between candidates timed in the same process, in
interleaved rounds: each round runs every candidate once, in a shuffled order, so a burst of
load from another process hits all of them alike. A candidate's figure is the median over
rounds of (its time / the baseline's time in the same round); the medians of the raw times
are printed next to it, with the interquartile range of the ratio as a noise indicator.

Peak memory is measured in a fresh subprocess per configuration: after imports, input
creation and a warm-up call (which includes any compilation), the kernel's peak-RSS counter
is reset (``/proc/self/clear_refs``), the call runs once, and the peak is ``VmHWM`` minus the
resident size just before the call.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Comparison:
    """Raw per-round times (seconds) of every candidate from :func:`compare`."""

    times: dict[str, list[float]]

    def median_ms(self, name: str) -> float:
        return 1e3 * statistics.median(self.times[name])

    def ratio(self, name: str, base: str) -> tuple[float, float, float]:
        """Median and quartiles over rounds of time(name) / time(base) in the same round."""
        ratios = sorted(t / b for t, b in zip(self.times[name], self.times[base]))
        if len(ratios) < 2:
            return ratios[0], ratios[0], ratios[0]
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        return statistics.median(ratios), q1, q3

    def table(self, baseline: str, notes: dict[str, str] | None = None) -> str:
        """A Markdown table: median and min times, ratio to ``baseline`` with its IQR."""
        notes = notes or {}
        lines = [f"| candidate | median ms | min ms | time / {baseline} (median, IQR) | note |",
                 "|---|---:|---:|---:|---|"]
        for name, times in self.times.items():
            med, q1, q3 = self.ratio(name, baseline)
            lines.append(f"| {name} | {self.median_ms(name):.2f} | {1e3 * min(times):.2f} | "
                         f"{med:.2f} ({q1:.2f}-{q3:.2f}) | {notes.get(name, '')} |")
        return "\n".join(lines)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def compare(candidates: dict[str, Callable[[], object]], *, rounds: int = 50,
            warmup: int = 3, seed: int = 0, clock: str = "wall") -> Comparison:
    """Time every candidate in ``rounds`` interleaved rounds, each in a freshly shuffled
    order, after ``warmup`` untimed calls each. Garbage collection runs between rounds.

    ``clock="cpu"`` measures the CPU time of the whole process (all its threads) instead of
    wall time: with one thread, it ignores time slices lost to other processes.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    now = CLOCKS[clock]
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    rng = random.Random(seed)
    names = list(candidates)
    times: dict[str, list[float]] = {n: [] for n in candidates}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            rng.shuffle(names)
            for name in names:
                fn = candidates[name]
                start = now()
                out = fn()
                times[name].append(now() - start)
                del out
            gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    return Comparison(times)


def machine_line() -> str:
    """One line describing the machine and the software."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
            f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
            f"{torch.get_num_threads()} threads, python {platform.python_version()}, "
            f"1-min load average at start {load:.2f}")


def steady_allocator() -> bool:
    """Make glibc serve and keep large blocks from its heap (Linux; False where unavailable).

    By default glibc ``mmap``s blocks above an adaptive threshold and trims freed heap memory,
    so whether a fresh 16 MiB output costs ~4000 page faults (about as long as the copy
    itself) depends on what the process allocated and freed before, which differs between
    candidates and runs. Fixing the threshold at its maximum (32 MiB) and never trimming gives
    the steady state of a loop that frees and reallocates same-size tensors.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(
        libc.mallopt(m_trim_threshold, 1 << 30))


# ---------------------------------------------------------------------------- peak memory

def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return int(match.group(1))


def release_free_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_rss_delta_mib(fn: Callable[[], object]) -> float:
    """Peak resident memory added by one call of ``fn``, in MiB (Linux only).

    Resets the kernel's high-water mark right before the call, so earlier work (imports,
    inputs, a warm-up call that compiles) does not count.
    """
    release_free_memory()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                       # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    out = fn()
    peak = _status_kib("VmHWM")
    del out
    return (peak - before) / 1024.0


def run_child(module: str, args: list[str], env: dict[str, str] | None = None) -> dict:
    """Run ``python -m module *args`` in a fresh interpreter (``env`` added to the current
    environment); it prints one JSON line last."""
    proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, check=False, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
