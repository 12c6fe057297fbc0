"""``posenc train``: a BPE vocabulary resolved, a run never overwritten by accident, bad
input as one-line errors."""

from __future__ import annotations

import pytest

from posenc.cli import main
from posenc.train import load_run

from tests.helpers import make_corpus


def cli_args(tmp_path, out, *extra):
    return ["train", "--out", str(out), "--d-model", "32", "--n-layers", "1", "--n-heads",
            "2", "--d-ff", "64", "--train-len", "16", "--batch-size", "4", "--steps", "4",
            "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--no-progress", *extra]


def snapshot(run_dir):
    return {p.relative_to(run_dir).as_posix(): p.read_bytes()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def one_line_error(capsys, match):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("posenc train: error: "), err
    assert match in err, err
    assert "Traceback" not in err


def test_cli_trains_resolves_bpe_vocab_and_refuses_to_clobber(tmp_path, capsys):
    data = make_corpus(tmp_path / "data")
    out = tmp_path / "run"
    assert main(cli_args(tmp_path, out, "--data", str(data), "--tokenizer", "bpe:300",
                         "--pe", "alibi", "--pe-option", "logn_base_len=16")) == 0
    assert "alibi: 4 steps" in capsys.readouterr().out
    loaded = load_run(out)
    assert loaded.train_config.model.vocab_size == loaded.tokenizer.vocab_size <= 300
    assert loaded.train_config.model.pe_options == {"logn_base_len": 16}
    before = snapshot(out)
    args = cli_args(tmp_path, out, "--data", str(data), "--tokenizer", "bpe:300", "--pe",
                    "alibi", "--pe-option", "logn_base_len=16")
    assert main([*args, "--lr", "0.01"]) == 2
    one_line_error(capsys, "holds a different run (differs in lr)")
    assert main(args) == 2
    one_line_error(capsys, "already holds this run (step 4 of 4); pass --resume")
    assert snapshot(out) == before                                   # nothing overwritten
    assert main([*args, "--resume"]) == 0                            # complete: nothing to do
    assert snapshot(out) == before
    assert main([*args, "--lr", "0.01", "--overwrite"]) == 0
    assert load_run(out).train_config.lr == 0.01


@pytest.mark.parametrize("case", ["missing", "empty", "too_long", "foreign_dir", "bad_option",
                                  "bad_pe", "resume_and_overwrite"])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, case):
    out = tmp_path / "run"
    data = make_corpus(tmp_path / "data", n=30)
    extra, msg = {
        "missing": (["--data", str(tmp_path / "nowhere")], "does not exist"),
        "empty": (["--data", str(tmp_path / "data" / "f00.txt")], None),
        "too_long": (["--data", str(data), "--train-len", "4000", "--d-model", "32"],
                     "training length 4000 is larger than the data"),
        "foreign_dir": (["--data", str(data)], "holds no posenc run"),
        "bad_option": (["--data", str(data), "--pe-option", "theta"], "key=value"),
        "bad_pe": (["--data", str(data), "--pe", "fancy"], "unknown encoding 'fancy'"),
        "resume_and_overwrite": (["--data", str(data), "--resume", "--overwrite"],
                                 "either resume or overwrite"),
    }[case]
    if case == "empty":
        (tmp_path / "data" / "f00.txt").write_text("\n \n")
        msg = "is empty"
    if case == "foreign_dir":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    assert main(cli_args(tmp_path, out, *extra)) == 2
    one_line_error(capsys, msg)
    if case == "foreign_dir":
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
    else:
        assert not out.exists()
