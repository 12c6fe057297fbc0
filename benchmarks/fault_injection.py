"""Kill ``posenc compare`` at random moments, resume it, and check that nothing was lost.

    .venv/bin/python -m benchmarks.fault_injection --kills 12 --seed 0

One uninterrupted run of ``posenc compare --preset smoke`` is the reference. Then, for each
trial, a fresh output directory: the command is started, killed with SIGKILL (or SIGTERM /
SIGHUP / SIGINT with ``--signals``) after a random delay within the reference's wall time,
and run again until it finishes (each rerun may be killed too, up to ``--chain`` times).
A trial passes when the finished results.json holds the reference's measurements exactly
(every perplexity, window loss, loss curve and entropy; wall-clock fields such as step
timings and tokens per second are left out) and no temporary file of posenc's (``.*.tmp``)
or lock file is left anywhere in the directory. The counts (kills sent, kills that landed
before the end, resumes, identical results, leftovers) are printed as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: fields that measure wall-clock time, not the models: they differ between any two runs
CLOCK_FIELDS = {"timing", "seconds", "train_tokens_per_s", "relative_to_median"}


def command(out: Path, preset: str) -> list[str]:
    return [sys.executable, "-m", "posenc", "compare", "--preset", preset, "--out", str(out),
            "--no-progress", "--no-atlas"]


def measurements(obj):
    """``obj`` without the wall-clock fields (see :data:`CLOCK_FIELDS`)."""
    if isinstance(obj, dict):
        return {k: measurements(v) for k, v in obj.items() if k not in CLOCK_FIELDS}
    if isinstance(obj, list):
        return [measurements(v) for v in obj]
    return obj


def leftovers(folder: Path) -> list[str]:
    """posenc's temporaries and lock files anywhere below ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*")
                  if p.name.endswith(".tmp") or p.name == ".posenc.lock")


def run(out: Path, preset: str, env: dict, kill_after: float | None, sig: int) -> int:
    """Run the comparison; with ``kill_after`` send ``sig`` after that many seconds.
    Returns the exit status (negative: the signal that ended it)."""
    proc = subprocess.Popen(command(out, preset), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    signalled = False
    try:
        proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(sig)
        signalled = True
    _, err = proc.communicate()
    if proc.returncode and not signalled:
        raise RuntimeError(f"compare failed ({proc.returncode}): {err[-2000:]}")
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=12, help="trials (default 12)")
    p.add_argument("--chain", type=int, default=3, help="most kills per trial (default 3)")
    p.add_argument("--preset", default="smoke")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--signals", default="KILL",
                   help="comma-separated signals to draw from, e.g. KILL,TERM,HUP,INT")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    sigs = [getattr(signal, f"SIG{s.strip().upper()}") for s in args.signals.split(",")]
    root = Path(tempfile.mkdtemp(prefix="posenc-faults-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "POSENC_CACHE_DIR": str(root / "cache")}
    try:
        start = time.perf_counter()
        run(root / "reference", args.preset, env, None, signal.SIGKILL)
        wall = time.perf_counter() - start
        reference = measurements(json.loads((root / "reference" / "results.json").read_text()))
        counts = {"trials": args.kills, "signals_sent": 0, "landed": 0, "resumes": 0,
                  "identical": 0, "leftovers": 0, "reference_seconds": round(wall, 1)}
        for trial in range(args.kills):
            out = root / f"trial{trial}"
            for _ in range(rng.randint(1, args.chain)):
                sig = rng.choice(sigs)
                code = run(out, args.preset, env, rng.uniform(0.3, wall), sig)
                counts["signals_sent"] += 1
                if code != 0:
                    counts["landed"] += 1
                if (out / "results.json").exists() and code != 0:
                    counts["resumes"] += 1
            run(out, args.preset, env, None, signal.SIGKILL)          # to the end
            got = measurements(json.loads((out / "results.json").read_text()))
            counts["identical"] += got == reference
            left = leftovers(out)
            counts["leftovers"] += bool(left)
            print(f"trial {trial}: {'identical' if got == reference else 'DIFFERENT'}"
                  + (f", left {left}" if left else ""), file=sys.stderr)
        print(json.dumps(counts))
        return 0 if counts["identical"] == args.kills and not counts["leftovers"] else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
