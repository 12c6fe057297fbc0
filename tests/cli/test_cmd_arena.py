"""``posenc arena`` on a tiny Llama saved to disk: a small arena end to end, presets and
options, a rerun that resumes, ``--overwrite``, bad input as one-line errors (exit 2)."""

from __future__ import annotations

import json

import pytest

from tests.hf.helpers import save_tiny_model

transformers = pytest.importorskip("transformers")

from posenc.cli import main  # noqa: E402
from posenc.hf.arena_request import CPU_METHODS, CPU_TASKS, RULER_LENGTHS, preset_request  # noqa: E402
from posenc.hf.ruler import FAMILIES  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


def _argv(tiny_dir, out, *extra):
    return ["arena", str(tiny_dir), "--text", str(tiny_dir.parent / "data.txt"),
            "--methods", "none,linear", "--factor", "2", "--original-length", "256",
            "--depths", "0,1", "--needles", "1", "--passkey-trials", "1", "--windows", "2",
            "--tasks", "none", "--out", str(out), "--no-progress", "--device", "cpu", *extra]


def test_cli_arena_end_to_end_then_resume_and_overwrite(tiny_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_argv(tiny_dir, out)) == 0
    printed = capsys.readouterr().out
    assert "## Verdicts" in printed and "wrote " in printed
    results = json.loads((out / "results.json").read_text())
    assert results["lengths"] == [256, 512] and results["methods"] == ["none", "linear"]
    assert results["setting"]["factor"] == 2.0
    for name in ("report.md", "needle.png", "passkey.png"):
        assert (out / name).stat().st_size > 0
    assert main(_argv(tiny_dir, out)) == 0                 # resumed: nothing left to measure
    assert main(_argv(tiny_dir, out, "--needles", "2")) == 2
    assert "settings differ (needles 1 there, 2 now)" in capsys.readouterr().err
    (out / "notes.txt").write_text("mine")
    assert main(_argv(tiny_dir, out, "--overwrite")) == 0
    assert (out / "notes.txt").read_text() == "mine"       # overwrite removes only its own
    saved = (out / "results.json").read_bytes()
    (out / "needle.png").unlink()
    assert main(["plot", str(out)]) == 0                   # plot knows the arena's kind
    assert (out / "needle.png").stat().st_size > 0 and (out / "results.json").read_bytes() == saved


@pytest.mark.parametrize("extra,message", [
    (("--methods", "none,warp"), "unknown method 'warp'"),
    (("--depths", "0,2"), "depths must be numbers in [0, 1]"),
    (("--lengths", "16"), "shorter than a prompt"),
    (("--seed", "-1"), "--seed must be between 0 and 2**64 - 1"),
    (("--needles", "0"), "needles must be an integer >= 1"),
    (("--tasks", "vt,qa"), "unknown RULER task 'qa'; valid tasks: multikey"),
    (("--tasks", "vt", "--ruler-samples", "0"), "ruler_samples must be an integer >= 1"),
    (("--tasks", "multikey"), "RULER multikey needs more than"),
])
def test_bad_arena_options_are_one_line_errors(tiny_dir, tmp_path, capsys, extra, message):
    out = tmp_path / "bad"
    assert main(_argv(tiny_dir, out, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_an_unknown_preset_is_a_usage_error(tiny_dir, tmp_path):
    with pytest.raises(SystemExit) as done:
        main(_argv(tiny_dir, tmp_path / "bad", "--preset", "tpu"))
    assert done.value.code == 2


def test_all_methods_are_those_of_extend_that_need_only_a_factor(tiny_dir, tmp_path, capsys):
    from posenc.methods import list_methods
    methods = [m for m in list_methods() if m != "logn"]      # log-n goes as an add-on
    out = tmp_path / "all"
    assert main(_argv(tiny_dir, out, "--methods", "all", "--depths", "0.5",
                      "--passkey-trials", "0", "--windows", "0")) == 0
    results = json.loads((out / "results.json").read_text())
    assert "none" in results["methods"] and "longrope" not in results["methods"]
    left_out = " ".join(results["notes"])
    assert all(m in results["methods"] or f"{m} (" in left_out for m in methods)
    assert "longrope (" in left_out
    assert "note: methods left out of 'all'" in capsys.readouterr().err


def test_the_presets_cover_the_cpu_default_and_the_full_gpu_grid():
    cpu = preset_request("cpu")
    assert cpu.methods == CPU_METHODS and cpu.original == 512 and cpu.factor == 4.0
    gpu = preset_request("gpu", needles=2)
    assert gpu.methods == ("all", "drope") and gpu.original is None and gpu.needles == 2
    assert gpu.lengths is None and gpu.multiples == (1.0, 2.0, 3.0) and len(gpu.depths) == 11
    assert gpu.factor == 4.0                   # 8192 -> 32768 on SmolLM2: 1x, 2x, 3x, 4x
    assert cpu.tasks == CPU_TASKS and cpu.ruler_samples == 3 and cpu.ruler_lengths is None
    assert gpu.tasks == tuple(FAMILIES) and gpu.ruler_lengths == RULER_LENGTHS


def test_cli_arena_runs_a_ruler_family_and_draws_ruler_png(tiny_dir, tmp_path, capsys):
    out = tmp_path / "ruler"
    assert main(_argv(tiny_dir, out, "--tasks", "multivalue", "--ruler-samples", "1",
                      "--ruler-lengths", "1024", "--original-length", "1024", "--lengths",
                      "1024", "--passkey-trials", "0", "--windows", "0", "--depths", "0")) == 0
    assert "### multi-value needles (MV-NIAH)" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["setting"]["tasks"] == ["multivalue"]
    assert sorted(results["ruler"]["multivalue"]) == ["linear", "none"]
    assert (out / "ruler.png").stat().st_size > 0
