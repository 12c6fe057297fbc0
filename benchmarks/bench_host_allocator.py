"""Lab runs with malloc's thresholds left alone against runs that keep freed host memory
(:mod:`posenc.train.host_allocator`): the time of a training step and its page faults.

Each run is one encoding of the ``default`` preset (its model, data and 400 steps), trained
as the lab trains it (:func:`posenc.train.loop.train` on the prepared study data, one
thread) in a fresh process, since the thresholds stay set for a process's life: ``system``
with ``POSENC_KEEP_HOST_MEMORY=0``, ``kept`` without. The training time the run's
checkpoint records (its steps only), divided by the steps, and the minor page faults of the
whole process per step. Rounds alternate the order of the two.

    .venv/bin/python -m benchmarks.bench_host_allocator --encodings rope alibi t5 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import machine_line


def one_run(encoding: str) -> dict:
    """Train ``encoding`` with the default preset in this process; its ms a step and minor
    page faults a step."""
    import torch

    from posenc.lab.compare.presets import PRESETS
    from posenc.lab.compare.study_data import prepare_study_data
    from posenc.train.loop import train
    torch.set_num_threads(1)
    cfg = PRESETS["default"]
    data = prepare_study_data(cfg.train.resolved())
    folder = Path(tempfile.mkdtemp(prefix="posenc-bench-"))
    try:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        train(cfg.train_config(encoding, data.vocab_size, 0), folder,
              progress=False, data=data.train)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        state = json.loads((folder / "state.json").read_text())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    steps = cfg.train.steps
    return {"ms": 1000 * state["train_time_s"] / steps, "faults": faults / steps}


def timed(encoding: str, keep: bool) -> dict:
    """:func:`one_run` in a fresh process, malloc tuned (``keep``) or not."""
    env = {**os.environ, "POSENC_KEEP_HOST_MEMORY": "1" if keep else "0"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_host_allocator", "--worker",
                          "--encodings", encoding], env=env, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encodings", nargs="+", default=["rope", "alibi", "t5"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(one_run(args.encodings[0])))
        return
    print(machine_line())
    print("| encoding | system ms/step | kept ms/step | kept / system (min-max) "
          "| system faults/step | kept faults/step |")
    print("|---|---:|---:|---:|---:|---:|")
    for encoding in args.encodings:
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for r in range(args.rounds):
            for keep in ((False, True) if r % 2 == 0 else (True, False)):
                runs[keep].append(timed(encoding, keep))
        ratios = [k["ms"] / s["ms"] for s, k in zip(runs[False], runs[True])]

        def med(keep: bool, key: str) -> float:
            return statistics.median(r[key] for r in runs[keep])
        print(f"| {encoding} | {med(False, 'ms'):.1f} | {med(True, 'ms'):.1f} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{med(False, 'faults'):,.0f} | {med(True, 'faults'):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
