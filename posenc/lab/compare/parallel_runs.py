"""A comparison's runs side by side: worker processes that each train and evaluate one
(encoding, seed) at a time.

The lab's models are small, so one of them keeps a second CPU core only partly busy: two
processes of one thread each train two runs in less wall time than one process of two
threads trains them one after another (BENCHMARKS.md, "Lab runs side by side"). On a CPU
:func:`default_workers` gives one worker per core (at most :data:`MAX_WORKERS`); on any other
device one, since runs would only queue for the same accelerator.

Workers share nothing but the prepared corpus cache and write only their own run folders;
the parent process keeps the study's lock, collects each worker's entries in the order the
plan lists them and saves results.json after each, as a sequential comparison does. A run a
worker finished training is on disk, so a comparison cut short resumes from it. A worker
trains with the same data, seed and steps as the parent would; its results equal the
sequential ones to float rounding (one thread sums in another order than two).

Workers die with the parent, however it ends: on Linux the kernel kills them when it exits
(``PR_SET_PDEATHSIG``), and everywhere a thread in each worker watches the parent's pid, so a
``SIGKILL``-ed comparison leaves no worker training on and holding a run's lock (an
immediate resume is not refused). Ctrl-C is the parent's to handle; a worker told to stop
(SIGTERM, as :meth:`RunPool.close` does) unwinds first, so the run folder's lock is
released and its lock file removed.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UserError

#: the most worker processes ``default_workers`` picks (more was not measured)
MAX_WORKERS = 4
#: fewer training steps than this in a whole comparison run in one process: starting a
#: worker (a Python with torch) takes a few seconds, more than side by side saves
MIN_PARALLEL_STEPS = 2000
#: how often a worker looks whether its parent still runs (seconds)
PARENT_POLL_S = 0.5
#: ``prctl`` option: the signal the kernel sends a process when its parent exits (Linux)
PR_SET_PDEATHSIG = 1
#: seconds a stopped worker has to unwind (release its run's lock) before it is killed
STOP_GRACE_S = 10.0


def default_workers(device: str, runs: int, steps: int) -> int:
    """Workers for ``runs`` runs of ``steps`` training steps each on ``device`` (a resolved
    device string): one per CPU core up to :data:`MAX_WORKERS` on a CPU, 1 on any other
    device (routing by device type) or for a comparison too small to gain."""
    if device.split(":")[0] != "cpu" or runs * steps < MIN_PARALLEL_STEPS:
        return 1
    return max(1, min(cpu_cores(), MAX_WORKERS, runs))


def cpu_cores() -> int:
    """The cores this process may run on (its affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def resolve_workers(value: str | int | None, device: str, runs: int, steps: int,
                    warn: Callable[[str], None] | None = None) -> int:
    """``--workers``: a count >= 1, or ``auto`` / None for :func:`default_workers`. A count
    above the cores this process may use is capped there (``warn`` is told): more worker
    processes than cores only share them, each run slower than alone."""
    if value is None or value == "auto":
        return default_workers(device, runs, steps)
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if count < 1 or str(value).strip() != str(count):
        raise UserError(f"--workers must be 'auto' or an integer >= 1, got {value!r}")
    cores = cpu_cores()
    if count > cores:
        if warn is not None:
            warn(f"--workers {count} is more than the {cores} cores this process may use; "
                 f"running {cores} workers")
        count = cores
    return count


@dataclass
class GroupResult:
    """What one worker made of an (encoding, seed): per scaling its (head, entry) for
    :func:`posenc.lab.compare.study.add_seed`, whether it trained now, or why training failed."""

    entries: dict[str | None, tuple[dict, dict]] = field(default_factory=dict)
    trained: bool = False
    failed: str | None = None


def run_group(cfg: Any, out_dir: Path, encoding: str, seed: int,
              scalings: list[str | None], threads: int) -> GroupResult:
    """In a worker: train (or resume, or reuse) one run and evaluate it under ``scalings``."""
    import torch

    from .study_data import prepare_study_data
    torch.set_num_threads(threads)
    data = prepare_study_data(cfg.train)             # from the corpus cache the parent made
    return train_and_evaluate(cfg, data, out_dir, encoding, seed, scalings)


def train_and_evaluate(cfg: Any, data: Any, out_dir: Path, encoding: str, seed: int,
                       scalings: list[str | None]) -> GroupResult:
    """Train (or resume, or reuse) the run ``out_dir/runs/<encoding>/seed<k>`` on the
    prepared ``data`` and evaluate it under ``scalings``, quietly."""
    from ...train.loop import TrainingDiverged
    from .one_run import ensure_trained, evaluate_run, run_dir_of, run_head
    from .progress import UnitProgress
    quiet = UnitProgress(cfg, lambda n: None)
    where = run_dir_of(encoding, seed)
    try:
        loaded, trained = ensure_trained(cfg, encoding, out_dir / where, data, quiet, seed)
    except TrainingDiverged as err:
        return GroupResult(failed=str(err))
    out = GroupResult(trained=trained)
    for scaling in scalings:
        out.entries[scaling] = (run_head(cfg, loaded, encoding, scaling),
                                evaluate_run(cfg, loaded, data.test, encoding, scaling, quiet,
                                             run_dir=where))
    return out


class WorkerStopped(SystemExit):
    """SIGTERM reached a worker: unwinds its call (locks released) before it exits."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise WorkerStopped(128 + signum)


def start_worker(parent: int) -> None:
    """First thing in every worker: die with process ``parent`` (module docstring), leave
    Ctrl-C to it, and stop on SIGTERM by unwinding."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_stopped)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL),
                                                    0, 0, 0)
        except (OSError, AttributeError):
            pass                                      # the watching thread still acts
    if os.getppid() != parent:                        # it died before we asked
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=_watch_parent, args=(parent,), name="posenc-parent-watch",
                     daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGKILL)


def call_in_worker(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; stopped by SIGTERM, the worker exits once the call has unwound (the
    pool would otherwise hand it the next call)."""
    try:
        return fn(*args)
    except WorkerStopped as stop:
        os._exit(int(stop.code))


class RunPool:
    """``workers`` processes of ``threads`` threads each (started with ``spawn``, which is
    safe after torch has started its own threads, and dying with this process:
    :func:`start_worker`); :meth:`submit` queues a comparison's (encoding, seed),
    :meth:`submit_call` any call, and :meth:`result` waits for one."""

    def __init__(self, workers: int, threads: int = 1) -> None:
        self.threads = threads
        self.executor = ProcessPoolExecutor(workers,
                                            mp_context=multiprocessing.get_context("spawn"),
                                            initializer=start_worker, initargs=(os.getpid(),))
        self.futures: dict[tuple[str, int], Future] = {}

    def submit(self, cfg: Any, out_dir: Path, encoding: str, seed: int,
               scalings: list[str | None]) -> None:
        """Queue one (encoding, seed) of the comparison in ``out_dir`` (its run's files are
        announced here, in the process that holds the comparison's folder)."""
        from .one_run import announce_run, run_dir_of
        announce_run(Path(out_dir) / run_dir_of(encoding, seed))
        self.submit_call((encoding, seed), run_group, cfg, out_dir, encoding, seed, scalings,
                         self.threads)

    def submit_call(self, key: Any, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` (a module-level function, picklable arguments) as ``key``."""
        self.futures[key] = self.executor.submit(call_in_worker, fn, *args)

    def result(self, key: Any) -> Any:
        """The result of the call queued as ``key`` (for :meth:`submit`: (encoding, seed));
        a worker's exception is raised here."""
        return self.futures[key].result()

    def close(self, abort: bool = False) -> None:
        """Stop the workers; queued groups that have not started are dropped. ``abort``
        (the comparison was interrupted): running groups are stopped too, at once; their
        runs resume from their last checkpoint."""
        if abort:
            processes = list((self.executor._processes or {}).values())
            for process in processes:
                process.terminate()
            deadline = time.monotonic() + STOP_GRACE_S
            for process in processes:            # one that does not unwind in time is killed
                process.join(max(0.0, deadline - time.monotonic()))
                if process.is_alive():
                    process.kill()
                    process.join()
        self.executor.shutdown(wait=True, cancel_futures=True)
