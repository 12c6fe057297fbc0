"""One writer per run folder: while a process holds a run's lock, train (with --overwrite too)
and eval are refused with one line naming its pid, and no file changes; the lock dies with
its process (SIGKILL included). Temporaries carry posenc's prefix (only those are tidied),
and every file written takes the mode the umask gives at that moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posenc.cli import main
from posenc.runio import (
    LOCK_FILE,
    DirectoryInUse,
    DirectoryLock,
    atomic_write,
    atomic_write_path,
    files_written_aside,
    is_temporary,
)

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = ["--pe", "alibi", "--train-len", "16", "--d-model", "16", "--n-layers", "1",
        "--n-heads", "2", "--batch-size", "2", "--eval-windows", "2", "--no-progress",
        "--device", "cpu", "--steps", "2", "--task", "copy"]


def hold_lock(folder):
    """A child process that holds ``folder``'s lock until killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from posenc.runio import DirectoryLock
        lock = DirectoryLock({str(folder)!r}, "posenc train").acquire()
        print("held", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def files(folder):
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_second_writer_is_refused_while_the_first_lives(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *TINY]) == 0
    assert not (run / LOCK_FILE).exists()                      # released at the end
    holder = hold_lock(run)
    try:
        before = files(run)
        for argv in (["train", "--out", str(run), *TINY, "--overwrite"],
                     ["train", "--out", str(run), *TINY],
                     ["eval", str(run), "--lengths", "16"]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert f"in use by another process (pid {holder.pid}, posenc train)" in err, err
            assert len(err.strip().splitlines()) == 1
            assert files(run) == before                        # --overwrite deleted nothing
        with pytest.raises(DirectoryInUse, match=f"pid {holder.pid}"):
            DirectoryLock(run, "test").acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with DirectoryLock(run, "test") as lock:                   # the kernel dropped it
        assert lock.held
    assert main(["eval", str(run), "--lengths", "16"]) == 0


def test_locked_empty_folder_and_a_stale_lock_file(tmp_path, capsys):
    """An empty folder another process locked is refused; its lock file left by a SIGKILL
    does not count as content afterwards."""
    run = tmp_path / "fresh"
    run.mkdir()
    holder = hold_lock(run)
    try:
        assert main(["train", "--out", str(run), *TINY]) == 2
        assert f"pid {holder.pid}" in capsys.readouterr().err
        assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert main(["train", "--out", str(run), *TINY]) == 0      # stale lock file: not a run


def test_taking_the_lock_removes_posenc_temporaries_only(tmp_path):
    """What a killed writer left (``.posenc-tmp-*`` files and folders) goes when the folder's
    lock is taken, in its atlas/ subfolder too unless another writer holds that; the user's
    own files stay, hidden ones that look like a temporary (``.thesis.20241127.tmp``)
    included."""
    out = tmp_path / "cmp"
    (out / "atlas").mkdir(parents=True)
    stale = [out / ".posenc-tmp-results.json.k2x_9abc.tmp",
             out / ".posenc-tmp-entropy_vs_length.png.a1b2c3d4.tmp",
             out / "atlas" / ".posenc-tmp-rope_decay.png.zz99_0qq.tmp"]
    for p in stale:
        p.write_bytes(b"half")
    (out / ".posenc-tmp-step-00000004.abcdefgh.tmp").mkdir()
    (out / ".posenc-tmp-step-00000004.abcdefgh.tmp" / "state.pt").write_bytes(b"half")
    mine = [out / ".notes.tmp", out / "draft.tmp", out / "atlas" / ".plan.v2.tmp",
            out / ".thesis.20241127.tmp", out / ".notes.backup01.tmp",
            out / "atlas" / ".fig.abcd1234.tmp", out / "results.json"]
    for p in mine:
        p.write_text("the user's")
    with DirectoryLock(out, "posenc compare"):
        assert all(p.exists() for p in mine)
        assert not any(p.exists() for p in stale)
        assert not (out / ".posenc-tmp-step-00000004.abcdefgh.tmp").exists()
    with DirectoryLock(out / "atlas", "posenc atlas"):         # another writer draws there
        (out / "atlas" / ".posenc-tmp-index.html.q1w2e3r4.tmp").write_text("being written")
        with DirectoryLock(out, "posenc compare"):
            assert (out / "atlas" / ".posenc-tmp-index.html.q1w2e3r4.tmp").exists()
    with DirectoryLock(out, "posenc compare"):
        assert not (out / "atlas" / ".posenc-tmp-index.html.q1w2e3r4.tmp").exists()
    assert sorted(p.name for p in out.rglob("*")) == sorted(
        ["atlas", *(p.name for p in mine)])


def test_a_run_folders_hidden_look_alike_survives_taking_its_lock(tmp_path):
    """``.notes.backup01.tmp`` in a run folder matched the old pattern of a temporary and
    was deleted when a command (here eval) took the run's lock."""
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *TINY]) == 0
    (run / ".notes.backup01.tmp").write_text("the user's")
    (run / ".posenc-tmp-state.json.abcd1234.tmp").write_text("half")
    assert main(["eval", str(run), "--lengths", "16"]) == 0
    assert (run / ".notes.backup01.tmp").read_text() == "the user's"
    assert not (run / ".posenc-tmp-state.json.abcd1234.tmp").exists()


def test_temporaries_carry_the_posenc_prefix(tmp_path, monkeypatch):
    """Every temporary the atomic writer makes is recognised as posenc's; nothing else is."""
    import tempfile
    made = []
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        made.append(Path(name).name)
        return fd, name
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    atomic_write(tmp_path / "report.md", b"# report\n")
    assert len(made) == 1 and made[0].startswith(".posenc-tmp-report.md.") and \
        is_temporary(made[0])
    assert not any(is_temporary(n) for n in (".thesis.20241127.tmp", ".notes.backup01.tmp",
                                             ".report.md.abcd1234.tmp"))


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_follow_the_umask_of_the_moment(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "a.json", b"{}")
        atomic_write_path(tmp_path / "b.bin", lambda p: p.write_bytes(b"x"))
        with files_written_aside(tmp_path / "saved") as aside:
            (aside / "model.safetensors").write_bytes(b"w")
            os.chmod(aside / "model.safetensors", 0o600)       # as safetensors leaves it
    finally:
        os.umask(old)
    for path in (tmp_path / "a.json", tmp_path / "b.bin", tmp_path / "saved" /
                 "model.safetensors"):
        assert path.stat().st_mode & 0o777 == mode, path
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == ["model.safetensors"]
