"""``posenc train``: a BPE vocabulary resolved, a run never overwritten by accident, bad
input as one-line errors, training on packed documents (and resuming it)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from posenc.cli import build_parser, cmd_train, main
from posenc.train import load_run
from tests.data.helpers import write_short_files
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
    one_line_error(capsys, "holds a posenc run whose settings differ (lr)")
    assert main(args) == 0                                # the same run resumes: complete
    assert snapshot(out) == before                                   # nothing overwritten
    assert main([*args, "--lr", "0.01", "--overwrite"]) == 0
    assert load_run(out).train_config.lr == 0.01


@pytest.mark.parametrize("case", ["missing", "empty", "too_long", "foreign_dir", "bad_option",
                                  "bad_pe"])
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


def test_cli_trains_on_packed_documents_and_resumes_only_packed(tmp_path, capsys,
                                                                 monkeypatch):
    data = write_short_files(tmp_path / "data", 60)
    args = cli_args(tmp_path, tmp_path / "straight", "--data", str(data), "--pack",
                    "--checkpoint-every", "2")
    assert main(args) == 0
    straight = load_run(tmp_path / "straight")
    doc = json.loads((tmp_path / "straight" / "config.json").read_text())
    assert doc["train"]["pack"] is True and straight.train_config.pack
    losses = [r["loss"] for r in straight.log if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)

    def stop_after_3(cfg, out, **kw):                  # Ctrl-C after step 3: step 2 is kept
        def stop(step, record, model):
            if step == 3:
                raise KeyboardInterrupt
        return real_train(cfg, out, on_step=stop, **kw)

    real_train = cmd_train.train
    out = tmp_path / "run"
    monkeypatch.setattr(cmd_train, "train", stop_after_3)
    assert main(cli_args(tmp_path, out, "--data", str(data), "--pack",
                         "--checkpoint-every", "2")) == 130
    monkeypatch.setattr(cmd_train, "train", real_train)
    capsys.readouterr()
    before = snapshot(out)
    assert main(cli_args(tmp_path, out, "--data", str(data), "--checkpoint-every",
                         "2")) == 2
    one_line_error(capsys, "holds a posenc run whose settings differ (pack)")
    assert snapshot(out) == before
    assert main(cli_args(tmp_path, out, "--data", str(data), "--pack", "--checkpoint-every",
                         "2")) == 0
    resumed = load_run(out)
    assert [r["loss"] for r in resumed.log if "loss" in r][-2:] == losses[-2:]
    for name, value in resumed.model.state_dict().items():
        torch.testing.assert_close(value, straight.model.state_dict()[name], rtol=0, atol=0)
    assert main(cli_args(tmp_path, tmp_path / "task", "--task", "copy", "--pack")) == 2
    one_line_error(capsys, "examples of task 'copy' are single documents already")


def test_file_system_refusals_are_one_line(tmp_path, capsys, monkeypatch):
    """A 300-character folder name (Errno 36) and a read-only output folder (Errno 30)."""
    import errno
    import pathlib
    data = make_corpus(tmp_path / "data")
    assert main(cli_args(tmp_path, tmp_path / ("r" * 300), "--data", str(data))) == 2
    one_line_error(capsys, "File name too long")
    read_only = tmp_path / "ro"
    real_mkdir = pathlib.Path.mkdir

    def mkdir(self, *args, **kwargs):
        if read_only in self.parents:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    assert main(cli_args(tmp_path, read_only / "run", "--data", str(data))) == 2
    one_line_error(capsys, "Read-only file system")


@pytest.mark.parametrize("extra, msg", [
    (["--eval-windows", "1000000000"], "lower --eval-windows"),
    (["--bf16", "--dtype", "float32"], "--bf16 asks for bfloat16 but --dtype is float32"),
])
def test_options_are_checked_before_the_run_folder_is_made(tmp_path, capsys, extra, msg):
    out = tmp_path / "run"
    assert main(cli_args(tmp_path, out, "--data", str(make_corpus(tmp_path / "data")),
                         *extra)) == 2
    one_line_error(capsys, msg)
    assert not out.exists()


def test_bf16_flag_and_dtype_agree(tmp_path):
    parser = build_parser()
    for extra in (["--bf16"], ["--dtype", "bfloat16"], ["--bf16", "--dtype", "bfloat16"]):
        args = parser.parse_args(cli_args(tmp_path, tmp_path / "run", *extra))
        assert cmd_train.config_from_args(args).bf16
    args = parser.parse_args(cli_args(tmp_path, tmp_path / "run"))
    assert not cmd_train.config_from_args(args).bf16
