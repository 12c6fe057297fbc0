"""Runs side by side: how many workers by device type, and a comparison in two worker
processes equal to the same comparison in one process, in the same order, resumable; the
workers stop with their parent, however it ends, and leave no lock behind."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posenc.errors import UserError
from posenc.lab.compare import parallel_runs
from posenc.lab.compare.parallel_runs import (
    MAX_WORKERS,
    MIN_PARALLEL_STEPS,
    default_workers,
    resolve_workers,
)
from posenc.lab.compare.presets import preset
from posenc.lab.compare.study import run_compare
from posenc.runio import LOCK_FILE, DirectoryLock
from tests.helpers import kill_and_expect_no_survivors, make_corpus, process_tree, wait_for


def test_workers_follow_the_device_type_and_the_size_of_the_comparison(monkeypatch):
    monkeypatch.setattr(parallel_runs, "cpu_cores", lambda: 16)
    big = MIN_PARALLEL_STEPS
    assert default_workers("cpu", 29, big) == MAX_WORKERS
    assert default_workers("cpu", 3, big) == 3                      # no idle worker
    assert default_workers("cpu", 29, MIN_PARALLEL_STEPS // 29 - 1) == 1   # too small to gain
    for device in ("cuda", "cuda:1", "mps", "xpu:0"):
        assert default_workers(device, 29, big) == 1               # one accelerator
    monkeypatch.setattr(parallel_runs, "cpu_cores", lambda: 2)
    assert default_workers("cpu", 29, big) == 2


def test_the_workers_option_takes_auto_or_a_count(monkeypatch):
    monkeypatch.setattr(parallel_runs, "cpu_cores", lambda: 16)
    assert resolve_workers("auto", "cuda", 10, 10_000) == 1
    assert resolve_workers("3", "cpu", 10, 10_000) == 3 and resolve_workers(2, "cpu", 1, 1) == 2
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(UserError, match="--workers must be 'auto' or an integer >= 1"):
            resolve_workers(bad, "cpu", 10, 10_000)


def test_more_workers_than_cores_are_capped_at_the_cores_with_a_warning(monkeypatch):
    monkeypatch.setattr(parallel_runs, "cpu_cores", lambda: 2)
    said = []
    assert resolve_workers("1000", "cpu", 10, 10_000, said.append) == 2
    assert said == [("--workers 1000 is more than the 2 cores this process may use; running 2 "
                     "workers")]
    assert resolve_workers("2", "cpu", 10, 10_000, said.append) == 2 and len(said) == 1


def test_two_workers_give_the_sequential_results_in_the_same_order(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    cfg = preset("smoke", steps=3, lengths=(16, 32), eval_tokens=64,
                 scalings=("linear:4", "self_extend:4"), encodings=("rope", "alibi", "nope"),
                 seeds=2, timing_rounds=0)
    alone = run_compare(cfg, tmp_path / "one", progress=False, atlas=False, workers=1)
    side = run_compare(cfg, tmp_path / "two", progress=False, atlas=False, workers=2)
    assert [r["label"] for r in side.results["runs"]] == \
        [r["label"] for r in alone.results["runs"]]
    for a, b in zip(alone.results["runs"], side.results["runs"]):
        for sa, sb in zip(a["seeds"], b["seeds"]):
            assert sa["seed"] == sb["seed"]
            for n, ppl in sa["ppl"].items():
                assert sb["ppl"][n] == pytest.approx(ppl, rel=1e-4)   # one thread vs two
    assert sorted(side.trained) == sorted(alone.trained) and len(side.trained) == 6
    assert {tuple(e.values()) for e in side.results["execution"].values()} == {(2, 1)}
    assert {e["workers"] for e in alone.results["execution"].values()} == {1}
    again = run_compare(cfg, tmp_path / "two", progress=False, atlas=False, workers=2)
    assert again.trained == () and again.results["runs"] == side.results["runs"]


def test_an_interrupted_comparison_stops_its_running_workers_at_once(tmp_path, monkeypatch):
    """Stopping a running worker (SIGTERM, as an interrupted comparison does) unwinds it:
    nobody holds its run's lock afterwards (released as it unwinds, or the worker killed
    after a grace period)."""
    from posenc.lab.compare.parallel_runs import RunPool
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    cfg = preset("smoke", steps=100_000, lengths=(16,), eval_tokens=64, scalings=(),
                 encodings=("nope",), timing_rounds=0)
    pool = RunPool(1)
    pool.submit(cfg, tmp_path / "out", "nope", 0, [None])
    worker = next(iter(pool.executor._processes.values()))
    lock = tmp_path / "out" / "runs" / "nope" / "seed0" / LOCK_FILE
    wait_for(lock.exists, 120, "the worker to start training")      # far from done
    start = time.perf_counter()
    pool.close(abort=True)
    assert time.perf_counter() - start < 30 and not worker.is_alive()
    assert pool.futures[("nope", 0)].done()
    with DirectoryLock(lock.parent, "posenc train"):       # nobody holds the run's lock
        pass


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_comparison_leaves_no_worker_and_resumes_at_once(tmp_path):
    """SIGKILL to ``posenc compare --workers 2`` while its workers train: within seconds no
    process it started runs on (workers, resource tracker), no run's lock is held, and the
    same command run again at once resumes and finishes."""
    out = tmp_path / "cmp"
    argv = [sys.executable, "-m", "posenc", "compare", "--out", str(out), "--preset", "smoke",
            "--encodings", "nope,alibi", "--steps", "200", "--lengths", "16,32",
            "--eval-tokens", "64", "--data", str(make_corpus(tmp_path / "data")),
            "--workers", "2", "--threads", "1", "--no-atlas", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "POSENC_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    started: set[int] = set()
    try:
        wait_for(lambda: any((out / "runs").glob(f"*/seed0/{LOCK_FILE}")) or
                 parent.poll() is not None, 120, "a worker to start training")
        assert parent.poll() is None, parent.stderr.read().decode()
        started = process_tree(parent.pid)
        assert len(started) >= 2                          # the workers (and the tracker)
    finally:
        kill_and_expect_no_survivors(parent, started)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    assert sorted(r["encoding"] for r in results["runs"]) == ["alibi", "nope"]
    assert not list(out.rglob(LOCK_FILE))
