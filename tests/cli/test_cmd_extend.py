"""``posenc extend`` on a tiny Llama saved to disk: methods, passkey, fine-tune and save end
to end; resuming after a SIGKILL; bad input as one-line errors."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.hf.helpers import byte_bpe_tokenizer as _tokenizer
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.cli import main  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny Llama (native context 128) with a byte-level BPE tokenizer, saved to disk."""
    path = tmp_path_factory.mktemp("tiny-llama")
    tok = _tokenizer()
    config = _config()
    config.vocab_size, config.max_position_embeddings = len(tok), 128
    _model(config).save_pretrained(path)
    tok.save_pretrained(path)
    (path.parent / "data.txt").write_text(Path(json.__file__).read_text() * 2)
    return path


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory):
    """A folder with a non-GGUF .gguf, a truncated GGUF, a GPT-2 model, a full output dir
    and a run folder of `posenc train`."""
    path = tmp_path_factory.mktemp("bad")
    (path / "bad.gguf").write_bytes(b"not a gguf file")
    (path / "trunc.gguf").write_bytes(b"GGUF" + bytes(range(40)))
    (path / "full").mkdir()
    (path / "full" / "results.json").write_text("{}")
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=300)).save_pretrained(path / "gpt2")
    _tokenizer().save_pretrained(path / "gpt2")
    (path / "posenc-run").mkdir()                          # what `posenc train` writes
    (path / "posenc-run" / "config.json").write_text(json.dumps(
        {"format": "posenc-run", "format_version": 1, "train": {}}))
    (path / "posenc-run" / "state.json").write_text("{}")
    return path


def test_cli_extend_end_to_end(tiny_dir, tmp_path, capsys):
    out, saved = tmp_path / "run", tmp_path / "saved"
    data = tiny_dir.parent / "data.txt"
    rc = main(["extend", str(tiny_dir), "--methods", "none,yarn,ntk+logn", "--lengths",
               "128,192", "--windows", "1", "--data", str(data), "--passkey",
               "--passkey-lengths", "256", "--passkey-depths", "0,1", "--passkey-trials", "1",
               "--finetune-steps", "2", "--finetune-len", "128", "--out", str(out),
               "--no-progress", "--preset", "gpu"])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["none", "yarn", "yarn+ft", "ntk+logn", "ntk+logn+ft"]
    yarn = results["methods"]["yarn"]
    assert [p["length"] for p in yarn["ppl"]] == [128, 192]
    assert yarn["extension"]["scaling"]["original_max_position_embeddings"] == 128
    assert len(results["methods"]["yarn+ft"]["finetune"]["losses"]) == 2
    assert results["methods"]["none"]["ppl"][1]["ppl"] != yarn["ppl"][1]["ppl"]
    for name in ("report.md", "ppl.png", "passkey_none.png", "passkey_ntk_logn_ft.png"):
        assert (out / name).stat().st_size > 0
    assert "| yarn |" in (out / "report.md").read_text()
    (out / "ppl.png").unlink()
    assert main(["plot", str(out)]) == 0 and (out / "ppl.png").stat().st_size > 0
    rc = main(["extend", str(tiny_dir), "--method", "linear", "--lengths", "128", "--windows",
               "1", "--data", str(data), "--out", str(tmp_path / "run2"), "--save", str(saved),
               "--gguf", str(tmp_path / "m.gguf"), "--no-progress", "--preset", "gpu"])
    assert rc == 0
    loaded = transformers.AutoModelForCausalLM.from_pretrained(saved)
    assert loaded.config.rope_parameters["rope_type"] == "linear"
    import gguf
    fields = gguf.GGUFReader(str(tmp_path / "m.gguf")).fields
    assert fields["llama.rope.scaling.type"].contents() == "linear"
    assert fields["llama.rope.scaling.factor"].contents() == 2.0
    rc = main(["extend", str(tiny_dir), "--methods", "none,self_extend,streaming", "--lengths",
               "192", "--windows", "1", "--data", str(data), "--out", str(tmp_path / "run3"),
               "--no-progress", "--preset", "gpu"])
    assert rc == 0
    results = json.loads((tmp_path / "run3" / "results.json").read_text())
    assert results["methods"]["self_extend"]["extension"]["attention"]["group"] >= 2
    se = results["methods"]["self_extend"]["extension"]["attention"]
    flags = f"--grp-attn-n {se['group']} --grp-attn-w {se['window']}"
    assert f"llama.cpp runs self_extend on the plain model with `{flags}`" in \
        (tmp_path / "run3" / "report.md").read_text()
    capsys.readouterr()
    rc = main(["extend", str(tiny_dir), "--method", "self_extend", "--lengths", "192",
               "--windows", "1", "--data", str(data), "--out", str(tmp_path / "run4"),
               "--gguf", str(tmp_path / "se.gguf"), "--no-progress", "--preset", "gpu"])
    assert rc == 0
    assert f"llama.cpp runs the method on the plain model in {tmp_path / 'se.gguf'} with: " \
           f"{flags}" in capsys.readouterr().out
    assert "llama.rope.scaling.type" not in gguf.GGUFReader(str(tmp_path / "se.gguf")).fields


def test_cli_extend_interrupted_then_resumed_reuses_finished_measurements(
        tiny_dir, tmp_path, capsys, monkeypatch):
    """Killed (SIGKILL) while measuring the second length of the first method, the same
    command measures only what is missing and keeps what was written exactly as it was."""
    from posenc.hf import measure
    out, data = tmp_path / "run", tiny_dir.parent / "data.txt"
    out.mkdir()                                            # an empty folder is fine
    argv = ["extend", str(tiny_dir), "--methods", "none,yarn", "--lengths", "128,192",
            "--windows", "1", "--data", str(data), "--out", str(out), "--no-progress",
            "--device", "cpu", "--dtype", "float32", "--passkey", "--passkey-lengths", "256",
            "--passkey-depths", "0", "--passkey-trials", "1", "--preset", "gpu"]
    killer = textwrap.dedent("""
        import os, signal, sys
        from posenc.cli import main
        from posenc.hf import measure
        real, calls = measure.perplexity, []

        def perplexity(fn, tokens, length, **kwargs):
            calls.append(length)
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(fn, tokens, length, **kwargs)

        measure.perplexity = perplexity
        main(sys.argv[1:])
    """)
    proc = subprocess.run([sys.executable, "-c", killer, *argv], capture_output=True,
                          text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                               "OMP_NUM_THREADS": "1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    measured, real = [], measure.perplexity

    def perplexity(fn, tokens, length, **kwargs):
        measured.append(length)
        return real(fn, tokens, length, **kwargs)

    monkeypatch.setattr(measure, "perplexity", perplexity)
    first = json.loads((out / "results.json").read_text())
    assert first["kind"] == "extend" and first["methods"] == {}
    assert list(first["partial"]["none"]["ppl"]) == ["128"]
    capsys.readouterr()
    assert main([*argv[:5], "128", *argv[6:]]) == 2                   # other lengths
    assert "settings differ (lengths [128, 192] there, [128] now)" in capsys.readouterr().err
    assert main(argv) == 0                                 # the same command resumes
    assert measured == [192, 128, 192]                     # none@128 was not measured again
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["none", "yarn"]
    assert results["methods"]["none"]["ppl"][0] == first["partial"]["none"]["ppl"]["128"]
    assert results["methods"]["yarn"]["passkey"]["accuracy"] in ([[0.0]], [[1.0]])
    assert results["partial"] == {} and not (out / "measurements.json").exists()
    assert not (out / ".posenc.lock").exists()


@pytest.mark.parametrize("make_args,message", [
    (lambda d, t: [str(t / "bad.gguf")], "is not a GGUF file"),
    (lambda d, t: [str(t / "trunc.gguf")], "GGUF file .*trunc.gguf is truncated or damaged"),
    (lambda d, t: [str(d), "--method", "yarn", "--out", str(t / "s"), "--save", str(t / "s")],
     "--save .* and --out .* overlap"),
    (lambda d, t: [str(d), "--method", "yarn", "--out", str(t / "s"), "--save",
                   str(t / "s" / "model")], "--save .* and --out .* overlap"),
    (lambda d, t: [str(d), "--method", "yarn", "--gguf", str(t / "s" / "dir" / "x.gguf")],
     r"--gguf file .*x.gguf: its folder .*s/dir does not exist"),
    (lambda d, t: [str(t / "nope")], "not found"),
    (lambda d, t: [str(t / "gpt2")], "has no rotary position embedding"),
    (lambda d, t: [str(d), "--method", "linear", "--factor", "1"], "needs factor > 1"),
    (lambda d, t: [str(d), "--method", "yarn", "--lengths", "4000000"], "length 4000000 needs"),
    (lambda d, t: [str(d), "--method", "yarn+logn", "--save", str(t / "s")],
     "cannot be saved for plain transformers"),
    (lambda d, t: [str(d), "--method", "self_extend", "--option", "window=8", "--option",
                   "group=3", "--original-length", "64", "--gguf", str(t / "s")],
     "llama.cpp needs the Self-Extend window to be a multiple of the group"),
    (lambda d, t: [str(d), "--method", "rerope", "--gguf", str(t / "s")],
     "cannot be written to GGUF: its positions per region"),
    (lambda d, t: [str(d), "--out", str(t / "full")], "posenc extend did not write"),
    (lambda d, t: [str(d), "--out", str(t / "full"), "--overwrite"],
     "posenc extend did not write"),
    (lambda d, t: [str(t / "posenc-run")], "is a posenc run .* `posenc eval`"),
    (lambda d, t: [str(d), "--passkey", "--passkey-trials", "0"],
     "passkey trials must be an integer >= 1"),
    (lambda d, t: [str(d), "--passkey", "--passkey-depths", "0,2"], "depths must be in"),
    (lambda d, t: [str(d), "--device-map", "auto", "--no-gguf-cache"]
     if importlib.util.find_spec("accelerate") is None else [str(d), "--device", "cuda"]
     if not torch.cuda.is_available() else [str(d), "--method", "yarn", "--methods", "none"],
     "needs accelerate|sees no GPU|not both"),
    (lambda d, t: [str(d), "--method", "yarn", "--methods", "none"], "not both"),
    (lambda d, t: [str(d), "--lengths", "128,1"], "lengths must be integers >= 2"),
    (lambda d, t: [str(d), "--finetune-steps", "0", "--lengths", "128"],
     "steps must be an integer >= 1"),
])
def test_cli_errors_are_one_line(tiny_dir, bad_inputs, tmp_path, capsys, make_args, message):
    data = tiny_dir.parent / "data.txt"
    argv = ["extend", *make_args(tiny_dir, bad_inputs), "--data", str(data), "--windows", "1",
            "--no-progress"]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("posenc extend: error:") and re.search(message, err), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert (bad_inputs / "full" / "results.json").read_text() == "{}"
    assert not (bad_inputs / "s").exists() and not (tmp_path / "out").exists()


def test_cli_checks_options_before_work_warns_and_overwrite_keeps_the_users_files(
        tiny_dir, tmp_path, capsys):
    """A refused option leaves nothing behind, so the corrected call is not refused; lengths
    inside the native context are warned about; --overwrite removes only what extend
    wrote."""
    out, data = tmp_path / "run", tiny_dir.parent / "data.txt"
    argv = ["extend", str(tiny_dir), "--method", "none", "--lengths", "64,128", "--data",
            str(data), "--out", str(out), "--no-progress", "--preset", "gpu"]
    passkey = ["--passkey", "--passkey-lengths", "256", "--passkey-depths", "0"]
    capsys.readouterr()
    assert main([*argv, *passkey, "--passkey-trials", "0"]) == 2
    assert "passkey trials" in capsys.readouterr().err and not out.exists()
    assert main([*argv, *passkey, "--passkey-trials", "1"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err                     # the passkey goes to 2x
    assert re.search(r"\| none \| \d+\.\d\d ± \d+\.\d\d \| \d+\.\d\d ± ", captured.out)
    (out / "mine.txt").write_text("kept")
    (out / "passkey_my_slide.png").write_text("a user's figure, not posenc's")
    assert main(argv) == 2                                   # another study, no --overwrite
    assert "settings differ (passkey true there, false now; passkey_depths" in \
        capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
    captured = capsys.readouterr()
    warning = ("posenc extend: warning: no length exceeds the native context (128 tokens): "
               "nothing is extended here")
    assert warning in captured.err
    assert "no length exceeds the native context" in (out / "report.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == [
        ".posenc-outputs.json", "mine.txt", "passkey_my_slide.png", "ppl.png", "report.md",
        "results.json"]                                     # passkey_none.png went
    assert (out / "mine.txt").read_text() == "kept"
    (out / "ppl.png").unlink()
    assert main(argv) == 0                                   # finished: only redrawn
    assert (out / "ppl.png").is_file()


def test_the_readme_example_on_a_cpu_shows_progress_in_its_first_unit_and_relative_labels(
        tmp_path, capsys):
    """The README's ``posenc extend smollm2 --methods none,linear,ntk,dynamic,yarn --factor
    2``, a tiny model of native context 8192 standing in for SmolLM2: on a CPU the cpu preset
    measures at 512, 1024 and 2048 tokens, a progress line names the first unit as it starts,
    and the labels count from the original length (512), not from the native 8192."""
    from tests.hf.helpers import save_tiny_model
    model = save_tiny_model(tmp_path / "tiny", native=8192)
    out, data = tmp_path / "run", tmp_path / "data.txt"
    capsys.readouterr()
    assert main(["extend", str(model), "--methods", "none,linear,ntk,dynamic,yarn",
                 "--factor", "2", "--device", "cpu", "--data", str(data), "--out",
                 str(out)]) == 0
    captured = capsys.readouterr()
    progress = [line for line in captured.err.splitlines() if line.startswith("extend: ")]
    assert progress[0] == ("extend:   0% none perplexity at 512 (00:00 so far, time left "
                           "after the first step)")
    assert any("left" in line and "about" in line for line in progress[1:])
    report = (out / "report.md").read_text()
    assert "| method | 512 (1x) | 1024 (2x) | 2048 (4x) |" in report
    assert "native context of the model: 8192" in report and "original length you set" in \
        report
    assert main(["extend", str(model), "--method", "none", "--original-length", "512",
                 "--lengths", "256,512", "--data", str(data), "--out", str(tmp_path / "in"),
                 "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "no length exceeds the original length you set (512 tokens)" in err
    assert "native context (" not in err
