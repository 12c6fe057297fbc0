"""``posenc eval`` on a run of a learned position table: lengths past the table are refused
before anything runs, with the message the command has always printed (exit 2, no file)."""

from __future__ import annotations

import pytest

from posenc.cli import main
from tests.helpers import make_corpus

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory):
    """A byte-level run of a learned table of 16 positions, trained for 4 steps."""
    root = tmp_path_factory.mktemp("eval")
    code = main(["train", "--out", str(root / "run"), "--data",
                 str(make_corpus(root / "data", n=12)), "--cache-dir", str(root / "cache"),
                 "--pe", "learned", "--train-len", "16", "--d-model", "32", "--n-layers", "1",
                 "--n-heads", "2", "--d-ff", "64", "--batch-size", "4", "--steps", "4",
                 "--no-progress", "--device", "cpu"])
    assert code == 0
    return root / "run"


def test_lengths_past_the_table_print_the_same_refusal(learned_run, capsys):
    capsys.readouterr()
    before = sorted(learned_run.glob("eval*.json"))
    code = main(["eval", str(learned_run), "--lengths", "16,32,64", "--max-tokens", "64",
                 "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == ("posenc eval: error: length 32 is past the learned position table of this "
                   "run (16 positions, encoding 'learned'); use lengths <= 16\n")
    assert sorted(learned_run.glob("eval*.json")) == before


def test_lengths_inside_the_table_evaluate(learned_run, capsys):
    code = main(["eval", str(learned_run), "--lengths", "8,16", "--max-tokens", "64",
                 "--device", "cpu"])
    out, _ = capsys.readouterr()
    assert code == 0 and "16 (L)" in out and "n/a" not in out


def test_a_run_whose_config_holds_a_bad_window_is_refused_in_the_window_line(tmp_path,
                                                                             capsys):
    """A config.json edited by hand to a bad attention window: the command prints the
    window's own line (as the library raises it), exit 2."""
    import json

    from posenc.train import TrainConfig
    from posenc.train.checkpoint import CONFIG_FILE, FORMAT, FORMAT_VERSION
    train = TrainConfig().to_dict()
    train["model"]["plan"] = {"layers": {"cycle": ["local", "rope"]},
                              "types": {"local": {"window": 0}}}
    (tmp_path / CONFIG_FILE).write_text(json.dumps(
        {"format": FORMAT, "format_version": FORMAT_VERSION, "train": train, "corpus": {}}))
    code = main(["eval", str(tmp_path), "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.endswith(
        ": plan type 'local': window must be an integer >= 1 (tokens), got 0\n")
