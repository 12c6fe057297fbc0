"""``posenc compare --preset tasks-smoke`` runs the synthetic-task study."""

import json

from posenc.cli import main


def cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_task_presets_run_the_task_study(tmp_path, capsys):
    out = tmp_path / "tasks"
    code, text, _ = cli(capsys, "compare", "--preset", "tasks-smoke", "--out", str(out),
                        "--encodings", "nope", "--seeds", "1", "--no-progress")
    assert code == 0 and "report:" in text
    saved = json.loads((out / "results.json").read_text())
    assert {r["encoding"] for r in saved["runs"]} == {"nope"}
    assert "## Decoder-only models" in (out / "report.md").read_text()
    code, _, err = cli(capsys, "compare", "--preset", "tasks-smoke", "--out", str(out),
                       "--steps", "3")
    assert code == 2 and "drop --steps" in err and len(err.strip().splitlines()) == 1
