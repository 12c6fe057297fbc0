"""``posenc plot``: an extension study redrawn, bad input as one-line errors."""

import json

import pytest

from posenc.cli import main


def cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("case", ["missing", "no_results", "foreign"])
def test_cli_plot_bad_input_is_one_line(tmp_path, capsys, case):
    target = tmp_path / "d"
    if case != "missing":
        target.mkdir()
    if case == "foreign":
        (target / "results.json").write_text(json.dumps({"hello": 1}))
    code, _, err = cli(capsys, "plot", str(target))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert {"missing": "not a directory", "no_results": "holds no results.json",
            "foreign": "neither"}[case] in err


def test_cli_plot_redraws_an_extension_study(tmp_path, capsys):
    results = {"model": "tiny", "native_context": 64,
               "config": {"lengths": [64, 128], "factor": 2.0},
               "methods": {"none": {"ppl": [{"length": 64, "ppl": 5.0},
                                            {"length": 128, "ppl": "inf"}]},
                           "yarn": {"ppl": [{"length": 64, "ppl": 5.1},
                                            {"length": 128, "ppl": 5.6}],
                                    "passkey": {"lengths": [64, 128], "depths": [0.0, 0.5],
                                                "accuracy": [[1.0, 0.5], [1.0, 0.0]]}}}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    code, text, err = cli(capsys, "plot", str(tmp_path))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["passkey_yarn.png", "ppl.png"]
    assert json.loads((tmp_path / "results.json").read_text()) == results
