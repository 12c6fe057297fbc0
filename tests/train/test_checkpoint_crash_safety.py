"""A training process killed with SIGKILL at any moment, checkpoint writes included, resumes to
the loss curve and weights of an uninterrupted run.

Each kill is either timed (the test kills the child after a random delay) or placed: the child
kills itself just before or after the n-th file operation of checkpointing (a file written, a
file or folder made durable, a folder renamed, old checkpoints deleted), so every gap between
two operations of a save is hit. A chain of children resumes one after the other, each killed,
until one finishes. ``POSENC_SLOW_TESTS=1`` runs a chain of at least 30 kills.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from posenc.models import LMConfig
from posenc.train import TrainConfig, load_run, train
from posenc.train.checkpoint import read_progress

STEPS = 12
#: names in posenc.train.checkpoint that do one file operation of a save
KILL_POINTS = ("atomic_write", "atomic_write_with", "save_model", "fsync_file", "fsync_dir",
               "sha256_file", "_prune", "rename")

CHILD = textwrap.dedent("""
    import functools, json, os, pathlib, signal, sys
    import torch
    torch.set_num_threads(1)
    from posenc.train import TrainConfig, train
    from posenc.train import checkpoint as ckpt
    cfg_json, run_dir, point, nth, when = sys.argv[1:6]
    nth = int(nth)
    calls = [0]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def counted(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            calls[0] += 1
            if calls[0] == nth and when == "before":
                die()
            out = fn(*a, **k)
            if calls[0] == nth and when == "after":
                die()
            return out
        return wrapper

    if point == "rename":
        pathlib.Path.rename = counted(pathlib.Path.rename)
    elif point != "none":
        setattr(ckpt, point, counted(getattr(ckpt, point)))
    train(TrainConfig.from_dict(json.loads(cfg_json)), run_dir, progress=False)
""")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("text")
    for i in range(20):
        (folder / f"{i:02d}.txt").write_text("".join(f"row {j} of file {i}: y = {i + j}\n"
                                                     for j in range(20)))
    return folder


def config(data, cache):
    model = LMConfig(d_model=16, n_layers=1, n_heads=2, max_len=16, d_ff=32, pe="rope",
                     dropout=0.1)                       # dropout: the RNG must resume too
    return TrainConfig(model=model, data=str(data), train_len=16, batch_size=2, steps=STEPS,
                       checkpoint_every=1, eval_every=4, eval_windows=2, cache_dir=str(cache),
                       device="cpu")


def child(cfg, run_dir, point="none", nth=0, when="before", kill_after=None):
    """Run (resume) training in a fresh process; returns its exit code (-9 when killed)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg.to_dict()),
                             str(run_dir), point, str(nth), when], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, -signal.SIGKILL), err
    return proc.returncode


def curve(run_dir):
    return [{k: v for k, v in r.items() if k in ("step", "loss", "lr", "grad_norm", "val_loss")}
            for r in load_run(run_dir).log]


@pytest.fixture(scope="module")
def straight(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("straight")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(config(data, root / "cache"), root / "run", progress=False)
    finally:
        torch.set_num_threads(threads)
    return root / "run"


def kill_chain(cfg, run_dir, kills, rng, startup, landed=None):
    """Kill up to ``kills`` children of a chain (timed or placed), then let one finish;
    returns the number of kills."""
    done = 0
    while done < kills:
        if rng.random() < 0.3:        # timed: anywhere, imports and data loading included
            where = "timed"
            code = child(cfg, run_dir, kill_after=rng.uniform(0.5, 1.5) * startup)
        else:                         # placed inside a checkpoint write
            point, when = rng.choice(KILL_POINTS), rng.choice(("before", "after"))
            where = f"{when} {point}"
            code = child(cfg, run_dir, point, rng.randint(1, 12), when)
        if code != 0 and landed is not None:
            landed.append(where)
        if code == 0:                 # the kill came too late: the run finished
            progress = read_progress(run_dir)
            assert progress["complete"] and progress["step"] == STEPS
            return done
        done += 1
        if (read_progress(run_dir) or {}).get("complete"):
            break                     # killed after the last commit (while tidying up)
    assert child(cfg, run_dir) == 0   # resumes, or only tidies up a finished run
    return done


def assert_same_run(a, b):
    assert curve(a) == curve(b)
    wa, wb = load_run(a).model.state_dict(), load_run(b).model.state_dict()
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=0, atol=0)
    leftovers = [p for p in b.rglob("*") if p.name.endswith(".tmp") or p.name == ".posenc.lock"]
    assert not leftovers
    assert len(list((b / "checkpoints").iterdir())) == 1


def startup_seconds(data, tmp_path):
    t0 = time.perf_counter()
    assert child(config(data, tmp_path / "cache"), tmp_path / "probe") == 0
    return time.perf_counter() - t0


def test_sigkill_anywhere_resumes_to_the_same_curve(data, straight, tmp_path):
    cfg = config(data, tmp_path / "cache")
    run = tmp_path / "run"
    killed = 0
    for point, nth, when in (("rename", 1, "after"), ("atomic_write", 3, "before")):
        killed += child(cfg, run, point, nth, when) == -signal.SIGKILL
    assert killed == 2 and read_progress(run)["step"] == 1
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(cfg, run, progress=False)
    finally:
        torch.set_num_threads(threads)
    assert_same_run(straight, run)


@pytest.mark.skipif(os.environ.get("POSENC_SLOW_TESTS") != "1",
                    reason="slow: set POSENC_SLOW_TESTS=1")
def test_thirty_random_sigkills(data, straight, tmp_path):
    rng = random.Random(1)
    startup = startup_seconds(data, tmp_path)
    total, chains, landed = 0, 0, []
    while total < 30:
        chains += 1
        run = tmp_path / f"run{chains}"
        total += kill_chain(config(data, tmp_path / "cache"), run, 30 - total, rng, startup,
                            landed)
        assert_same_run(straight, run)
    counts = {w: landed.count(w) for w in sorted(set(landed))}
    print(f"{total} SIGKILLs in {chains} chain(s), every run resumed to the same curve; "
          f"kills: {counts}")
