"""``compare --overwrite`` removes what the comparison wrote and nothing a user owns: files
whose names look like its outputs, and a user's file inside a run folder (the run is trained
again beside it)."""

from __future__ import annotations

import json

import pytest

from posenc.lab.compare.presets import preset
from posenc.lab.compare.study import run_compare
from posenc.runio import LOCK_FILE
from tests.helpers import make_corpus

pytestmark = pytest.mark.usefixtures("single_thread")

USERS = ("runs/mynotes/seedlings.txt", "runs/nope/seed0-backup-of-good-run/model.bin",
         "runs/nope/seed0/.notes.backup01.tmp", "atlas/my_figure.png", ".thesis.20241127.tmp")


def test_overwrite_keeps_every_file_a_user_put_there(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    cfg = preset("smoke", steps=3, lengths=(16,), eval_tokens=64, scalings=(),
                 encodings=("nope",), timing_rounds=0, data=str(make_corpus(tmp_path / "d")))
    out = tmp_path / "cmp"
    run_compare(cfg, out, progress=False, atlas=False)
    for rel in USERS:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("the user's")
    again = run_compare(preset("smoke", steps=4, lengths=(16,), eval_tokens=64, scalings=(),
                               encodings=("nope",), timing_rounds=0, data=cfg.train.data),
                        out, progress=False, atlas=False, overwrite=True)
    assert again.trained == ("nope/seed0",)
    assert all((out / rel).read_text() == "the user's" for rel in USERS)
    state = json.loads((out / "runs" / "nope" / "seed0" / "state.json").read_text())
    assert state["step"] == 4 and not list(out.rglob(LOCK_FILE))
