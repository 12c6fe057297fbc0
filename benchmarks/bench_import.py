"""CPU time of ``import posenc`` against ``import torch``, each in a fresh interpreter, in
interleaved rounds (shuffled order per round):

    .venv/bin/python -m benchmarks.bench_import --rounds 10 [--baseline OTHER_CHECKOUT]

A round starts one process per candidate and reads its user + system CPU time from
``resource.getrusage(RUSAGE_CHILDREN)``; the figure is the median over rounds of posenc's time
over torch's time in the same round, with the interquartile range.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile

from .common import machine_line

CANDIDATES = {"torch": "import torch", "posenc": "import posenc",
              "posenc.hf": "import posenc.hf"}


def cpu_seconds(code: str, path: str | None = None) -> float:
    """User + system CPU seconds of a fresh interpreter running ``code`` (with ``path``, a
    checkout of posenc, first on its module path)."""
    env = None if path is None else {**os.environ, "PYTHONPATH": path}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # from a neutral folder: ``python -c`` puts the working folder first on the module path
    subprocess.run([sys.executable, "-c", code], check=True, env=env,
                   cwd=tempfile.gettempdir())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--baseline", help="another checkout of posenc to time beside this one "
                   "(its root folder)")
    args = p.parse_args()
    print(machine_line())
    candidates = {name: (code, None) for name, code in CANDIDATES.items()}
    if args.baseline:
        candidates["posenc (baseline)"] = ("import posenc", args.baseline)
    times: dict[str, list[float]] = {name: [] for name in candidates}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(candidates)
        rng.shuffle(order)
        for name in order:
            times[name].append(cpu_seconds(*candidates[name]))
    for name in candidates:
        ratios = sorted(t / b for t, b in zip(times[name], times["torch"]))
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        print(f"{name:17s} median {statistics.median(times[name]):.2f} s CPU; "
              f"x torch {statistics.median(ratios):.2f} ({q[0]:.2f}-{q[2]:.2f})")


if __name__ == "__main__":
    main()
