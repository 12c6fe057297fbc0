"""Lab runs trained one after another with every thread, against the same runs split over
worker processes of one thread each: whether running a comparison's runs side by side would
give more evidence per hour on a small CPU.

Each run is one encoding of the ``default`` preset (its model, data and 400 steps), trained
as the lab trains it (:func:`posenc.train.loop.train` on the prepared study data) into a
temporary folder. ``sequential``: one process with ``--threads`` threads trains every
encoding in turn. ``parallel``: ``--workers`` processes of one thread each share the
encodings round-robin and run at the same time. The wall time of each arrangement, and
their ratio, per round; rounds alternate the order of the two.

    .venv/bin/python -m benchmarks.bench_parallel_runs --encodings rope alibi t5 learned
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import machine_line


def train_runs(encodings: list[str], threads: int) -> None:
    """Train each of ``encodings`` with the default preset, one after another."""
    import torch

    from posenc.lab.compare.presets import PRESETS
    from posenc.lab.compare.study_data import prepare_study_data
    from posenc.train.loop import train
    torch.set_num_threads(threads)
    cfg = PRESETS["default"]
    data = prepare_study_data(cfg.train.resolved())
    for encoding in encodings:
        folder = Path(tempfile.mkdtemp(prefix="posenc-bench-"))
        try:
            train(cfg.train_config(encoding, data.vocab_size, 0), folder,
                  progress=False, data=data.train)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _worker(encodings: list[str], threads: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.bench_parallel_runs",
                             "--worker", "--threads", str(threads), "--encodings", *encodings],
                            stdout=subprocess.DEVNULL)


def timed(encodings: list[str], workers: int, threads: int) -> float:
    """Wall seconds to train ``encodings`` in ``workers`` processes of ``threads`` each."""
    start = time.perf_counter()
    procs = [_worker(encodings[i::workers], threads) for i in range(workers)]
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError("a worker failed")
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encodings", nargs="+", default=["rope", "alibi", "t5", "learned"])
    p.add_argument("--threads", type=int, default=2, help="threads of the sequential process")
    p.add_argument("--workers", type=int, default=2, help="processes of one thread each")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        train_runs(args.encodings, args.threads)
        return
    print(machine_line())
    train_runs(args.encodings[:1], args.threads)            # the corpus cache, warm
    ratios = []
    for r in range(args.rounds):
        order = ("sequential", "parallel") if r % 2 == 0 else ("parallel", "sequential")
        took = {name: timed(args.encodings, 1, args.threads) if name == "sequential"
                else timed(args.encodings, args.workers, 1) for name in order}
        ratios.append(took["sequential"] / took["parallel"])
        print(f"round {r + 1}: sequential ({args.threads} threads) {took['sequential']:.1f} s, "
              f"parallel ({args.workers} x 1 thread) {took['parallel']:.1f} s, "
              f"speed-up {ratios[-1]:.2f}x", flush=True)
    print(f"speed-up median {statistics.median(ratios):.2f}x "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}) over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
