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
            "foreign": "was not written by"}[case] in err


def test_cli_plot_redraws_an_extension_study(tmp_path, capsys):
    grid = {"lengths": [64, 128], "depths": [0.0, 0.5], "accuracy": [[1.0, 0.5], [1.0, 0.0]],
            "accuracy_by_length": {"64": 1.0, "128": 0.25}}
    memory = {"peak_rss_bytes": 2**30, "rss_before_bytes": 2**29}
    results = {"kind": "extend", "schema": 1, "model": "tiny", "native_context": 64,
               "n_tokens": 256,
               "config": {"lengths": [64, 128], "factor": 2.0, "original": None,
                          "max_windows": 2, "stride": None, "passkey": True,
                          "passkey_lengths": [64, 128], "passkey_depths": [0.0, 0.5],
                          "passkey_trials": 1},
               "methods": {"none": {"ppl": [{"length": 64, "ppl": 5.0, "n_windows": 2},
                                            {"length": 128, "ppl": "inf", "n_windows": 1}],
                                    "passkey": grid, **memory},
                           "yarn": {"ppl": [{"length": 64, "ppl": 5.1, "n_windows": 2},
                                            {"length": 128, "ppl": 5.6, "n_windows": 1}],
                                    "passkey": grid, **memory}}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    code, text, err = cli(capsys, "plot", str(tmp_path))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "passkey_none.png", "passkey_yarn.png", "ppl.png"]
    assert "| yarn | 5.10 | 5.60 |" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text()) == results


def comparison(ppl: dict) -> dict:
    """The smallest results.json of `posenc compare` that plot draws."""
    run = {"encoding": "rope", "inference_scaling": None, "label": "rope", "train_len": 64,
           "ppl": ppl, "ppl_spread": {}, "seeds": [{"seed": 0, "ppl": ppl}]}
    return {"config": {"train_len": 64, "seeds": 1}, "corpus": {}, "runs": [run]}


@pytest.mark.parametrize("results,field", [
    (comparison({"64": 5.0, "abc": 6.0}), "runs[0].ppl has a length that is not a positive "
                                          "integer, got 'abc'"),
    (comparison({"64": 5.0, "128": "lots"}), "runs[0].ppl['128'] is not a number, got 'lots'"),
    (comparison({"64": 5.0, "128": True}), "runs[0].ppl['128'] is not a number, got True"),
    ({"model": "m", "config": {}, "n_tokens": 1,
      "methods": {"yarn": {"ppl": [{"length": "x", "ppl": 5}]}}},
     "methods['yarn'].ppl[0].length is not a positive integer, got 'x'"),
    ({"model": "m", "config": {}, "n_tokens": 1,
      "methods": {"yarn": {"ppl": [{"length": 64, "ppl": "a"}]}}},
     "methods['yarn'].ppl[0].ppl is not a number, got 'a'"),
])
def test_non_numeric_lengths_and_values_name_the_file_and_field(tmp_path, capsys, results,
                                                                  field):
    (tmp_path / "results.json").write_text(json.dumps(results))
    code, out, err = cli(capsys, "plot", str(tmp_path))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{tmp_path / 'results.json'}: {field}" in err
    assert not list(tmp_path.glob("*.png"))


def test_notes_and_non_finite_values_are_numbers_plot_can_draw(tmp_path, capsys):
    results = comparison({"64": 5.0, "128": "inf", "256": "n/a (past learned table of 64)"})
    (tmp_path / "results.json").write_text(json.dumps(results))
    from posenc.lab.report.redraw import check_comparison_numbers
    check_comparison_numbers(results, tmp_path / "results.json")        # no error


def test_plot_finds_every_study_commands_kind_without_a_list_of_its_own():
    from posenc.cli import command_modules
    from posenc.cli.cmd_plot import study_kinds
    names = {k.name for k in study_kinds()}
    assert {"compare", "tasks", "extend", "arena"} <= names
    studies = [m for m in command_modules() if hasattr(m, "STUDY")]
    assert sorted(m.NAME for m in studies) == ["arena", "compare", "extend", "tasks"]
