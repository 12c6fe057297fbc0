"""What the README's commands write in the repository root is ignored by git (runs/ of
``train``/``compare``/``extend``, atlas/ of ``posenc atlas --out atlas``), and the package's
own folders of the same names are not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ignored(path: str) -> bool:
    done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", path],
                          capture_output=True)
    if done.returncode not in (0, 1):
        pytest.skip(f"git check-ignore failed: {done.stderr.decode().strip()}")
    return done.returncode == 0


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs git and a checkout")
def test_outputs_of_documented_commands_are_ignored_and_sources_are_not():
    for written in ("atlas/index.html", "runs/demo/results.json", "runs/x/config.json",
                    "runs/extend-smollm2/report.md"):
        assert ignored(written), written
    for source in ("posenc/atlas/atlas.py", "tests/atlas/test_atlas.py", "README.md"):
        assert not ignored(source), source
