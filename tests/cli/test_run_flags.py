"""The study commands share one meaning of their run flags: ``--overwrite`` on each, the
older ``--force`` and ``--resume`` accepted where they existed with one deprecation line, a
rerun in the same ``--out`` that resumes, and a rerun with other settings refused naming the
setting. Library messages name options as the caller spells them, never as flags."""

from __future__ import annotations

import pytest

from posenc.cli import build_parser, main
from posenc.errors import UserError

#: command -> its positional arguments and the deprecated flags it accepts
COMMANDS = {
    "train": ([], ("--resume",)),
    "compare": ([], ()),
    "tasks": ([], ()),
    "extend": (["tiny"], ("--force", "--resume")),
    "arena": (["tiny"], ("--force", "--resume")),
}


def _parse(command, *flags):
    positional, _ = COMMANDS[command]
    return build_parser().parse_args([command, *positional, "--out", "somewhere", *flags])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_study_command_takes_overwrite(command, capsys):
    assert _parse(command).overwrite is False
    assert _parse(command, "--overwrite").overwrite is True
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command,flag", [(c, f) for c, (_, flags) in sorted(COMMANDS.items())
                                          for f in flags])
def test_older_flags_are_accepted_with_one_deprecation_line(command, flag, capsys):
    args = _parse(command, flag)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"posenc {command}: {flag} is deprecated")
    assert args.overwrite is (flag == "--force")          # --resume: a rerun resumes anyway
    assert not hasattr(args, "force") and not hasattr(args, "resume")


@pytest.mark.parametrize("command", ["compare", "tasks"])
def test_commands_that_never_had_them_refuse_the_older_flags(command):
    for flag in ("--force", "--resume"):
        with pytest.raises(SystemExit):
            _parse(command, flag)


def test_train_resumes_a_rerun_and_refuses_other_settings_naming_them(tmp_path, capsys):
    from tests.helpers import make_corpus
    data = make_corpus(tmp_path / "data", n=30)
    out = tmp_path / "run"
    argv = ["train", "--out", str(out), "--data", str(data), "--cache-dir",
            str(tmp_path / "cache"), "--steps", "2", "--train-len", "16", "--d-model", "16",
            "--n-layers", "1", "--n-heads", "2", "--batch-size", "2", "--device", "cpu",
            "--no-progress"]
    assert main(argv) == 0
    assert main([*argv, "--resume"]) == 0                    # a rerun resumes (complete)
    assert "--resume is deprecated" in capsys.readouterr().err
    assert main([*argv, "--lr", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "settings differ (lr)" in err and "--overwrite" in err and len(err.splitlines()) == 1
    assert main([*argv, "--lr", "0.5", "--overwrite"]) == 0


def test_library_refusals_name_options_as_the_api_spells_them(tmp_path):
    from posenc.hf.extend_study import ExtendRequest, ExtendRuntime, ExtendStudy
    from posenc.study import RunDirectory, StudyKind
    from posenc.train.config import TrainConfig
    from posenc.train.loop import check_run_dir
    kind = StudyKind("toy", 1, "posenc toy", ("results.json",))
    out = tmp_path / "out"
    with RunDirectory(out, kind) as rd:
        rd.claim()
        rd.save({"x": 1})
    messages = []
    with RunDirectory(out, kind) as rd, pytest.raises(UserError) as err:
        rd.open(lambda existing: "x differs")
    messages.append(str(err.value))
    study = ExtendStudy(ExtendRequest(model="tiny", methods=("none", "yarn"),
                                      finetune_steps=2),
                        ExtendRuntime(save=str(tmp_path / "saved")))
    with pytest.raises(UserError) as err:
        study.prepare(None)
    messages.append(str(err.value))
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(UserError) as err:
        check_run_dir(tmp_path / "a_file", TrainConfig(), overwrite=False)
    messages.append(str(err.value))
    assert "overwrite=True" in messages[0] and "out_dir" in messages[0]
    assert "save saves one extended model" in messages[1]
    assert "run_dir" in messages[2]
    for message in messages:
        assert "--" not in message, message
