"""Every script in examples/ runs and passes its own checks.

An example prints one line per check, starting with "ok" or "FAIL", and exits non-zero if any
check fails. Each runs as a subprocess with the repository root first on PYTHONPATH, so it
imports this checkout's posenc; a new examples/*.py is picked up without editing this file.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

#: checks an example must print (beyond "all ok"), so a check that vanishes is noticed
EXPECTED_CHECKS = {
    "own_attention.py": [
        "rope   sdpa, is_causal",
        "alibi  sdpa, float mask",
        "alibi  sdpa, 4 queries after 12 cached keys",
        "alibi  flex, score_mod + block_mask",
        "t5     sdpa, float mask",
        "t5     sdpa, 4 queries after 12 cached keys",
        "t5     flex, score_mod + block_mask",
        "rope   left-padded (B, T) positions",
        "rope   left-padded rows = each prompt alone",
        "alibi  left-padded (B, T) positions",
        "alibi  left-padded rows = each prompt alone",
    ],
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")      # tiny tensors: threads only contend
    return env


@functools.cache
def _run(*args: str) -> subprocess.CompletedProcess:
    """One run per script and session (FlexAttention compiles on first use: seconds)."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)


def _checks(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(("ok", "FAIL"))]


def test_examples_exist_and_import_this_checkout():
    assert EXAMPLES, "examples/ holds no script"
    done = _run("-c", "import importlib.util; print(importlib.util.find_spec('posenc').origin)")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve().is_relative_to(ROOT)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda path: path.name)
def test_example_runs_and_passes_its_checks(script: Path):
    done = _run(str(script))
    report = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, report
    checks = _checks(done.stdout)
    assert checks, f"{script.name} printed no check\n{report}"
    assert [line for line in checks if not line.startswith("ok")] == [], report
    printed = "\n".join(checks)
    for label in EXPECTED_CHECKS.get(script.name, []):
        assert f"ok    {label} " in printed, f"missing check {label!r}\n{report}"
