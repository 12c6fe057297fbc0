"""SIGTERM and SIGHUP stop every command as Ctrl-C does: the run's lock is released, one
"interrupted" line is printed, the exit is 128 + the signal's number, the run resumes, and
the handlers that were installed before are back afterwards."""

from __future__ import annotations

import os
import signal

import pytest

from posenc.cli import cmd_train, main
from posenc.runio import LOCK_FILE
from posenc.train import load_run
from tests.helpers import make_corpus

pytestmark = pytest.mark.usefixtures("single_thread")


def cli_args(tmp_path, out, *extra):
    return ["train", "--out", str(out), "--d-model", "16", "--n-layers", "1", "--n-heads",
            "2", "--d-ff", "32", "--train-len", "16", "--batch-size", "2", "--steps", "6",
            "--checkpoint-every", "2", "--eval-windows", "2", "--data",
            str(make_corpus(tmp_path / "data")), "--cache-dir", str(tmp_path / "cache"),
            "--device", "cpu", "--no-progress", *extra]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_train_stopped_by_a_signal_releases_its_lock_and_resumes(signum, tmp_path, capsys,
                                                                 monkeypatch):
    real_train = cmd_train.train

    def train_then_signal(*args, **kwargs):
        def on_step(step, record, model):
            if step == 3:
                os.kill(os.getpid(), signum)      # delivered here, between two steps
        return real_train(*args, on_step=on_step, **kwargs)

    before = signal.getsignal(signum)
    out = tmp_path / "run"
    monkeypatch.setattr(cmd_train, "train", train_then_signal)
    assert main(cli_args(tmp_path, out)) == 128 + signum
    err = capsys.readouterr().err
    assert err == f"posenc train: interrupted by {signal.Signals(signum).name}\n", err
    assert not (out / LOCK_FILE).exists()
    assert signal.getsignal(signum) is before
    assert load_run(out).steps == 2                                   # the last checkpoint
    monkeypatch.setattr(cmd_train, "train", real_train)
    assert main(cli_args(tmp_path, out)) == 0
    assert load_run(out).steps == 6


def test_atlas_stopped_by_sigterm_releases_its_lock(tmp_path, capsys, monkeypatch):
    import posenc.atlas

    def draw_then_signal(out, run_dir=None, progress=None):
        (out / "partial.txt").write_text("drawn so far")
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the signal did not stop the command")

    monkeypatch.setattr(posenc.atlas, "write_atlas", draw_then_signal)
    out = tmp_path / "atlas"
    out.mkdir()                                       # an existing folder: drawn under its lock
    assert main(["atlas", "--out", str(out), "--quiet"]) == 128 + signal.SIGTERM
    assert "posenc atlas: interrupted by SIGTERM" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["partial.txt"]   # no lock left
