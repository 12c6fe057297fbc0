"""A comparison through Ray against the local process pool: what running a study's units as
Ray tasks costs on one machine.

Each arm is the command a user types, timed from start to exit in a fresh process, into an
empty folder: ``pool`` is ``posenc compare --preset P --workers 2`` (two worker processes);
``ray`` is the same with ``--ray ADDRESS``, on a Ray cluster of this machine's CPUs that
the benchmark starts once (a standing cluster, as after ``ray start``); ``ray-start`` is
the same with ``--ray`` alone, which starts (and stops) a Ray of its own (``--arms`` picks
some; ``pool`` is always timed). Rounds alternate the order of the arms. The ratio to
``pool`` per round, its median and range, and the overhead per unit and per task
((arm - pool) / count) are printed as a markdown table.
First, the engine's own cost per unit: ``--noop`` units that do nothing run through
:class:`~posenc.study.ray_units.RayUnits` on the standing cluster (all submitted at once,
taken in order, as a study does), wall seconds per unit.

    .venv/bin/python -m benchmarks.bench_ray --preset smoke --rounds 3
    .venv/bin/python -m benchmarks.bench_ray --preset default --rounds 3 --arms pool,ray

``--one-run ENCODING``: instead, one run of the preset's ``ENCODING`` trained at a time,
nothing beside it, five ways (in this process, in a pool worker, in this process on data
that went through Ray's object store, in a Ray task with the data shipped or loaded there,
then in this process again): its training tokens per second each way.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine_line

ARMS = ("pool", "ray", "ray-start")


def command(preset: str, out: Path, arm: str, address: str) -> list[str]:
    """The ``posenc compare`` command line of ``arm``."""
    base = [sys.executable, "-m", "posenc", "compare", "--preset", preset, "--out", str(out),
            "--device", "cpu", "--no-atlas", "--no-progress"]
    return base + {"pool": ["--workers", "2"], "ray": ["--ray", address],
                   "ray-start": ["--ray"]}[arm]


def timed(cmd: list[str]) -> float:
    """Wall seconds of ``cmd`` (which must succeed)."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr}")
    return time.perf_counter() - start


def units_and_tasks(out: Path) -> tuple[int, int]:
    """(units that ran as Ray tasks, distinct tasks) of a finished comparison in ``out``."""
    placed = json.loads((out / "results.json").read_text())["placement"]
    return len(placed), len({(k.split("/")[1], k.split("/")[-1]) for k in placed})


def nothing(i: int) -> int:
    return i


def noop_seconds(address: str, count: int) -> float:
    """Wall seconds per unit of ``count`` units that do nothing, run as Ray tasks (the
    workers already started by a first, untimed batch)."""
    from posenc.study import Unit
    from posenc.study.ray_units import RayCluster, RayUnits
    units = [Unit((i,), f"unit {i}") for i in range(count)]

    def batch() -> float:
        start = time.perf_counter()
        executor = RayUnits(None, units, RayCluster(address),
                            lambda unit: (unit.key, nothing, unit.key))
        for unit in units:
            executor.run(unit, lambda n: None)
        executor.close()
        return time.perf_counter() - start
    batch()
    return batch() / count


def _tokens_per_s(result: Any) -> float:
    return result.entries[None][1]["train_tokens_per_s"]


def _here(cfg: Any, data: Any, encoding: str) -> float:
    """Train and evaluate ``encoding``'s run in this process, one thread; tokens/s."""
    import torch

    from posenc.lab.compare.parallel_runs import train_and_evaluate
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        return _tokens_per_s(train_and_evaluate(cfg, data, Path(tmp), encoding, 0, [None]))


def _loaded_in_task(cfg: Any, encoding: str) -> float:
    from posenc.lab.compare.study_data import prepare_study_data
    return _here(cfg, prepare_study_data(cfg.train), encoding)


def _shipped(cfg: Any, data: Any, encoding: str) -> float:
    from posenc.lab.compare.remote_runs import run_group_shipped
    return _tokens_per_s(run_group_shipped(cfg, data, {}, encoding, 0, [None])[0])


def one_run_speeds(preset_name: str, encoding: str) -> dict[str, float]:
    """Training tokens/s of one run of ``encoding``, one at a time, each way (docstring)."""
    import ray

    from posenc.lab.compare.parallel_runs import RunPool, run_group
    from posenc.lab.compare.presets import preset
    from posenc.lab.compare.study_data import prepare_study_data
    cfg = preset(preset_name).with_options(encodings=(encoding,))
    data = prepare_study_data(cfg.train)
    speeds = {"in this process": _here(cfg, data, encoding)}
    pool = RunPool(1)
    with tempfile.TemporaryDirectory() as tmp:
        pool.submit_call("run", run_group, cfg, Path(tmp), encoding, 0, [None], 1)
        speeds["in a pool worker"] = _tokens_per_s(pool.result("run"))
    pool.close()
    ray.init(num_cpus=1, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    try:
        ref = ray.put(data)
        speeds["in this process, data from the object store"] = _here(cfg, ray.get(ref),
                                                                       encoding)
        speeds["in a Ray task, data shipped"] = ray.get(
            ray.remote(_shipped).options(num_cpus=1).remote(cfg, ref, encoding))
        speeds["in a Ray task, data loaded there"] = ray.get(
            ray.remote(_loaded_in_task).options(num_cpus=1).remote(cfg, encoding))
        speeds["in this process again"] = _here(cfg, data, encoding)
    finally:
        ray.shutdown()
    return speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--noop", type=int, default=200, help="units for the engine's cost")
    parser.add_argument("--noop-only", action="store_true")
    parser.add_argument("--one-run", metavar="ENCODING", help="one run's speed, five ways")
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma-separated arms to time, pool always among them ({ARMS})")
    args = parser.parse_args()
    arms = tuple(a for a in ARMS if a in {"pool", *args.arms.split(",")})
    if unknown := set(args.arms.split(",")) - set(ARMS):
        parser.error(f"unknown arms {sorted(unknown)}; choose from {ARMS}")
    import os

    import ray
    from ray.cluster_utils import Cluster
    print(machine_line())
    if args.one_run:
        for way, speed in one_run_speeds(args.preset, args.one_run).items():
            print(f"{args.one_run} {way}: {speed:,.0f} training tokens/s")
        return
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": os.cpu_count(), "include_dashboard": False})
    ray.init(address=cluster.address, logging_level=logging.WARNING)
    print(f"standing cluster started in {time.perf_counter() - started:.1f} s")
    per_unit = noop_seconds(cluster.address, args.noop)
    ray.shutdown()                                   # the commands connect themselves
    print(f"a unit that does nothing: {per_unit * 1000:.1f} ms per unit ({args.noop} units)")
    if args.noop_only:
        cluster.shutdown()
        return
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    counts = (0, 0)
    try:
        with tempfile.TemporaryDirectory(prefix="posenc-bench-ray-") as tmp:
            for r in range(args.rounds):
                order = arms if r % 2 == 0 else tuple(reversed(arms))
                for arm in order:
                    out = Path(tmp) / f"{arm}-{r}"
                    times[arm].append(timed(command(args.preset, out, arm, cluster.address)))
                    if arm != "pool":
                        counts = units_and_tasks(out)
                print(f"round {r + 1}: " + ", ".join(f"{a} {times[a][-1]:.1f} s"
                                                     for a in arms), flush=True)
    finally:
        cluster.shutdown()
    units, tasks = counts
    print(f"\n{units} units in {tasks} Ray tasks per comparison\n")
    others = arms[1:]
    print("| round | " + " | ".join(arms) + "".join(f" | {a} / pool" for a in others) + " |")
    print("|---:|" + "---:|" * (len(arms) + len(others)))
    for r in range(args.rounds):
        pool = times["pool"][r]
        print(f"| {r + 1} | " + " | ".join(f"{times[a][r]:.1f} s" for a in arms)
              + "".join(f" | {times[a][r] / pool:.2f}x" for a in others) + " |")
    for arm in others:
        ratios = [t / p for t, p in zip(times[arm], times["pool"])]
        extra = statistics.median(t - p for t, p in zip(times[arm], times["pool"]))
        print(f"\n{arm} / pool: median {statistics.median(ratios):.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f}); median extra {extra:.1f} s = "
              f"{extra / max(units, 1):.2f} s per unit, {extra / max(tasks, 1):.1f} s per task")

if __name__ == "__main__":
    main()
