"""The ``posenc`` command: bad input and damage in a run are one-line errors (exit 2, or 3
for a diverged run) that change no file; what a crash leaves (a torn log line) is tolerated;
results are never replaced silently; a closed pipe ends quietly; ``python -m posenc`` and
``--version``."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from posenc.cli import main
from posenc.train.checkpoint import committed_file, read_progress

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = ["--pe", "rope", "--train-len", "16", "--d-model", "16", "--n-layers", "1",
        "--n-heads", "2", "--batch-size", "2", "--eval-windows", "2", "--no-progress",
        "--device", "cpu"]


def snapshot(*folders):
    """Every file (path, bytes) under ``folders``."""
    return {str(p): p.read_bytes() for f in folders if f.exists() for p in sorted(f.rglob("*"))
            if p.is_file()}


def one_line(capsys, code, expected_code=2):
    err = capsys.readouterr().err
    assert code == expected_code, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run trained from a relative --data path (cwd = its parent), with its cache."""
    root = tmp_path_factory.mktemp("trained")
    (root / "text").mkdir()
    for i in range(12):
        (root / "text" / f"{i}.txt").write_text(f"document {i}: " + "abc def " * 40 + "\n")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        code = main(["train", "--out", "run", "--data", "text", "--cache-dir", "cache",
                     "--steps", "4", *TINY])
    finally:
        os.chdir(cwd)
    assert code == 0
    return root


def copy_run(trained, tmp_path):
    shutil.copytree(trained / "run", tmp_path / "run")
    return tmp_path / "run"


def test_relative_data_is_stored_resolved_and_evaluates_elsewhere(trained, tmp_path, capsys,
                                                                  monkeypatch):
    cfg = json.loads((trained / "run" / "config.json").read_text())["train"]
    assert cfg["data"] == str((trained / "text").resolve())
    assert cfg["cache_dir"] == str((trained / "cache").resolve())
    monkeypatch.chdir(tmp_path)                                 # somewhere else
    run = copy_run(trained, tmp_path)
    assert main(["eval", str(run), "--lengths", "16", "--max-tokens", "256"]) == 0, \
        capsys.readouterr().err


def test_each_eval_setting_keeps_its_own_file(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    for lengths in ("16", "16,32", "16"):
        assert main(["eval", str(run), "--lengths", lengths, "--max-tokens", "256"]) == 0
    files = sorted(p.name for p in run.glob("eval*.json"))
    assert len(files) == 2, files
    saved = [json.loads((run / f).read_text())["lengths"] for f in files]
    assert sorted(saved) == [[16], [16, 32]]
    capsys.readouterr()


def test_eval_output_that_is_a_directory(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    argv = ["eval", str(run), "--lengths", "16", "--max-tokens", "256"]
    assert main(argv) == 0
    target = next(run.glob("eval*.json"))
    target.unlink()
    target.mkdir()
    before = snapshot(run)
    err = one_line(capsys, main(argv))
    assert "is not a file" in err or "is a directory" in err
    assert snapshot(run) == before and target.is_dir()


def test_random_bytes_state_pt_on_resume(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    committed_file(run, "state.pt").write_bytes(os.urandom(4096))
    before = snapshot(run)
    err = one_line(capsys, main(["train", "--out", str(run), "--data",
                                 str(trained / "text"), "--cache-dir", str(trained / "cache"),
                                 "--steps", "4", *TINY]))
    assert "corrupt checkpoint" in err and "state.pt" in err and "weights_only" not in err
    assert snapshot(run) == before


def test_flipped_bytes_in_the_weights_fail_eval(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    weights = committed_file(run)
    data = bytearray(weights.read_bytes())
    for i in range(8):
        data[-1 - 97 * i] ^= 0xFF                       # inside the tensor data, not the header
    weights.write_bytes(bytes(data))
    before = snapshot(run)
    err = one_line(capsys, main(["eval", str(run), "--lengths", "16"]))
    assert "model.safetensors" in err and "sha256" in err
    assert snapshot(run) == before


def test_torn_last_log_line_is_tolerated(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    with open(run / "log.jsonl", "a") as f:
        f.write('{"step": 5, "loss": 2.')                  # what a crash mid-append leaves
    assert main(["eval", str(run), "--lengths", "16", "--max-tokens", "256"]) == 0
    assert main(["train", "--out", str(run), "--data", str(trained / "text"), "--cache-dir",
                 str(trained / "cache"), "--steps", "4", *TINY]) == 0
    (run / "log.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    err = one_line(capsys, main(["eval", str(run), "--lengths", "16"]))
    assert "line 2 is not JSON" in err


def test_corrupted_token_cache_is_detected(trained, tmp_path, capsys):
    shutil.copytree(trained / "cache", tmp_path / "cache")
    array = next((tmp_path / "cache" / "tokens").glob("*-train.npy"))
    data = bytearray(array.read_bytes())
    data[-5] ^= 0x01
    array.write_bytes(bytes(data))
    before = snapshot(tmp_path)
    err = one_line(capsys, main(["train", "--out", str(tmp_path / "new"), "--data",
                                 str(trained / "text"), "--cache-dir", str(tmp_path / "cache"),
                                 "--steps", "2", *TINY]))
    assert "token cache" in err and array.name in err and "corrupt" in err
    assert snapshot(tmp_path) == before and not (tmp_path / "new").exists()


def test_batch_that_cannot_fit_is_refused_before_allocating(trained, tmp_path, capsys):
    before = snapshot(tmp_path)
    err = one_line(capsys, main(["train", "--out", str(tmp_path / "run"), "--data",
                                 str(trained / "text"), "--cache-dir", str(trained / "cache"),
                                 "--steps", "2", *TINY, "--batch-size", "100000000"]))
    assert "batch_size=100000000" in err and "GiB" in err
    assert snapshot(tmp_path) == before and not (tmp_path / "run").exists()


def test_divergence_stops_with_the_step_and_value(trained, tmp_path, capsys):
    args = ["train", "--out", str(tmp_path / "run"), "--data", str(trained / "text"),
            "--cache-dir", str(trained / "cache"), "--steps", "30", "--checkpoint-every", "2",
            "--lr", "1e30", "--warmup-steps", "0", "--grad-clip", "0", *TINY]
    err = one_line(capsys, main(args), expected_code=3)
    assert "training diverged at step" in err and ("nan" in err or "inf" in err)
    progress = read_progress(tmp_path / "run")
    assert progress is None or not progress["complete"]
    # a skip budget lets the run go on past non-finite steps, logging them as skipped
    code = main(args[:2] + [str(tmp_path / "skip")] + args[3:] + ["--skip-bad-steps", "1000"])
    assert code == 0, capsys.readouterr().err
    log = [json.loads(line) for line in (tmp_path / "skip" / "log.jsonl").read_text()
           .splitlines()]
    assert any(r.get("skipped") for r in log)
    assert read_progress(tmp_path / "skip")["bad_steps"] > 0


def test_closed_pipe_version_and_python_m(tmp_path):
    """``posenc list | head`` (the reader gone before the output) ends quietly;
    ``python -m posenc`` is the command; ``--version`` prints the package version."""
    import os
    import subprocess
    import sys

    import posenc
    proc = subprocess.Popen([sys.executable, "-m", "posenc", "list", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    proc.stdout.close()                                    # the reader is gone
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""                                       # no BrokenPipeError traceback
    out = subprocess.run([sys.executable, "-m", "posenc", "--version"], capture_output=True,
                         text=True, check=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == f"posenc {posenc.__version__}"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["--version"],
                                  ["list", "--help"], ["generate", "RUN", "--prompt", "doc",
                                                       "--max-new-tokens", "3",
                                                       "--temperature", "0"]])
def test_output_to_a_full_device_is_one_line_exit_2(trained, args):
    """stdout on /dev/full (Errno 28): the write or the final flush fails as one line, never
    a traceback from the interpreter's shutdown nor a silent exit 0."""
    import subprocess
    import sys
    args = [str(trained / "run") if a == "RUN" else a for a in args]
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "posenc", *args], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "No space left on device" in proc.stderr


def test_eval_help_states_the_default_lengths_eval_uses(trained, tmp_path, capsys,
                                                        monkeypatch):
    """--help and the behaviour read one constant: change it and both follow."""
    from posenc.cli import build_parser, cmd_eval
    monkeypatch.setattr(cmd_eval, "DEFAULT_LENGTH_MULTIPLIERS", (1, 2))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--help"])
    assert "(default: L,2L)" in " ".join(capsys.readouterr().out.split())
    run = copy_run(trained, tmp_path)
    assert main(["eval", str(run), "--max-tokens", "256"]) == 0
    capsys.readouterr()
    saved = [json.loads(p.read_text())["lengths"] for p in run.glob("eval*.json")]
    assert saved == [[16, 32]]                                  # L = 16
    assert cmd_eval.multiples_of_L((1, 2, 4, 8, 16)) == "L,2L,4L,8L,16L"


@pytest.mark.parametrize("error", [RuntimeError("index -1 is out of bounds"),
                                   KeyError("pe"), ValueError("shape mismatch")])
def test_an_internal_error_keeps_its_traceback_and_exits_1(error, monkeypatch, capsys):
    """A bug (anything but a UserError or an OSError) is not dressed as a user's mistake:
    main lets it propagate, and the process prints its traceback and exits 1."""
    import posenc.cli.cmd_list as cmd_list

    def broken(args):
        raise error
    monkeypatch.setattr(cmd_list, "run", broken)
    with pytest.raises(type(error)):
        main(["list"])
    assert "error:" not in capsys.readouterr().err


def test_an_internal_error_in_a_process_is_a_traceback_with_exit_1(tmp_path):
    import subprocess
    import sys
    code = ("import sys, posenc.cli.cmd_list as c\n"
            "def broken(args): raise RuntimeError('injected bug')\n"
            "c.run = broken\n"
            "from posenc.cli import main\n"
            "sys.exit(main(['list']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=os.getcwd())
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "RuntimeError: injected bug" in proc.stderr


def test_a_user_error_from_deep_inside_is_one_line_with_exit_2(monkeypatch, capsys):
    import posenc.cli.cmd_list as cmd_list
    from posenc.errors import UserError

    def refused(args):
        raise UserError("n_heads=3 must divide d_model=8")
    monkeypatch.setattr(cmd_list, "run", refused)
    err = one_line(capsys, main(["list"]))
    assert err == "posenc list: error: n_heads=3 must divide d_model=8\n"


@pytest.mark.parametrize("argv,message", [
    (["extend", "smollm2", "--memory-limit-gb", "0"],
     ("posenc extend: error: argument --memory-limit-gb: must be a finite number > 0, got "
      "'0' (see posenc extend --help)")),
    (["compare", "--out", "x", "--encodings", ""],
     "posenc compare: error: argument --encodings: "),
    (["tasks"], "posenc tasks: error: the following arguments are required: --out"),
    (["nosuch"], "posenc: error: argument COMMAND: invalid choice: 'nosuch'"),
])
def test_a_usage_error_is_one_line_without_the_usage_block(argv, message, capsys, tmp_path,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(message) and "usage:" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["loop", "missing"])
def test_a_symbolic_link_to_nothing_as_out_is_named(target, capsys, tmp_path):
    link = tmp_path / "out"
    link.symlink_to(link if target == "loop" else tmp_path / "gone")
    with pytest.raises(SystemExit) as stop:
        main(["train", "--out", str(link), *TINY])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"argument --out: {link} is a symbolic link that leads nowhere (a loop or a " \
           "missing target)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("argv,shown", [
    (["arena", "--depths", "0.5,0.5"], "depths lists 0.5"),
    (["arena", "--lengths", "600,600"], "lengths lists 600"),
    (["arena", "--methods", "none,none"], "methods lists none"),
    (["extend", "smollm2", "--methods", "yarn,yarn"], "methods lists yarn"),
    (["extend", "smollm2", "--lengths", "600,600"], "lengths lists 600"),
    (["extend", "smollm2", "--passkey", "--passkey-depths", "0.5,0.5"],
     "passkey depths lists 0.5"),
    (["compare", "--encodings", "rope,rope"], "encodings lists rope"),
    (["compare", "--lengths", "64,64"], "lengths lists 64"),
    (["compare", "--scalings", "linear:2,linear:2"], "scalings lists linear:2"),
    (["tasks", "--encodings", "rope,alibi,rope"], "encodings lists rope"),
    (["eval", "run", "--lengths", "64,64"], "lengths lists 64"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_every_list_option_refuses_duplicates_alike(argv, shown, tmp_path, capsys,
                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    if argv[0] != "eval":
        argv = [*argv, "--out", "out"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"error: {shown} more than once; give each once, got " in err
    assert list(tmp_path.iterdir()) == []
