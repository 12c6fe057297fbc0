"""``posenc tasks --preset tasks-smoke`` runs the synthetic-task study."""

import json

import pytest

from posenc.cli import main


def cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_tasks_runs_the_task_study(tmp_path, capsys):
    out = tmp_path / "tasks"
    code, text, _ = cli(capsys, "tasks", "--preset", "tasks-smoke", "--out", str(out),
                        "--encodings", "nope", "--seeds", "1", "--no-progress")
    assert code == 0 and "report:" in text
    saved = json.loads((out / "results.json").read_text())
    assert {r["encoding"] for r in saved["runs"]} == {"nope"}
    assert "## Decoder-only models" in (out / "report.md").read_text()
    code, text, _ = cli(capsys, "tasks", "--preset", "tasks-smoke", "--out", str(out),
                        "--encodings", "nope", "--seeds", "1", "--no-progress")
    assert code == 0 and "(0 trained now)" in text                  # a rerun resumes
    code, _, err = cli(capsys, "tasks", "--preset", "tasks", "--out", str(out),
                       "--encodings", "nope", "--seeds", "1", "--no-progress")
    assert code == 2 and "settings differ (differs in " in err and "--overwrite" in err


def test_cli_tasks_refuses_what_it_does_not_take(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:        # a perplexity flag is not a task option
        main(["tasks", "--preset", "tasks-smoke", "--out", str(tmp_path), "--steps", "3"])
    assert exit_.value.code == 2 and "--steps" in capsys.readouterr().err
    code, _, err = cli(capsys, "tasks", "--preset", "tasks-smoke", "--out", str(tmp_path),
                       "--seeds", "0")
    assert code == 2 and "--seeds must be >= 1" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(capsys, "tasks", "--preset", "tasks-smoke", "--out", str(tmp_path),
                       "--workers", "0")
    assert code == 2 and "--workers must be 'auto' or an integer >= 1" in err
    with pytest.raises(SystemExit):                 # the task presets left compare
        main(["compare", "--preset", "tasks-smoke", "--out", str(tmp_path)])
