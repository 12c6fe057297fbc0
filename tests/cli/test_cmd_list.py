"""``posenc list`` and ``posenc list --json`` describe every registered encoding; the table
then lists the named layer plans."""

from __future__ import annotations

import json

import pytest

from posenc import list_encodings
from posenc.cli import main
from posenc.cli.cmd_list import PLANS_HEADING
from posenc.encodings import encoding_class, encoding_options
from posenc.models.plans import NAMED_PLANS, describe_plans

pytestmark = pytest.mark.usefixtures("single_thread")

COLUMNS = ["encoding", "family", "hooks", "extrapolates", "kv cache", "backends"]


def _expected(name: str) -> dict:
    cls = encoding_class(name)
    return {"name": name, "family": cls.family, "hooks": cls.hook_kinds(),
            "extrapolates": cls.extrapolates, "kv_cache": cls.cache_note,
            "backends": list(cls.backends())}


def test_list_json_has_every_encoding(capsys):
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list_encodings()
    for row in rows:
        want = _expected(row["name"])
        assert {k: row[k] for k in want} == want
        assert set(row["backends"]) <= {"sdpa", "flex", "eager"} and "eager" in row["backends"]
        options = {k: v for k, v in encoding_options(row["name"]).items()
                   if k not in ("n_heads", "head_dim", "max_len")}
        assert row["options"] == json.loads(json.dumps(options, default=str))
    by_name = {r["name"]: r for r in rows}
    assert by_name["rope"]["family"] == "rotary" and by_name["rope"]["hooks"] == ["transform_qk"]
    assert by_name["alibi"]["hooks"] == ["score_bias", "score_mod"]
    assert by_name["learned"]["hooks"] == ["embed"]
    assert {"theta", "layout", "rotary_dim", "scaling"} <= set(by_name["rope"]["options"])


def test_list_table_has_a_row_per_encoding(capsys):
    assert main(["list", "--wide"]) == 0
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    end = lines.index("")                                   # the plans follow a blank line
    header, rule, body = lines[0], lines[1], lines[2:end]
    starts = [header.index(col) for col in COLUMNS]
    assert starts == sorted(starts) and starts[0] == 0
    assert set(rule.replace(" ", "")) == {"-"}
    assert [line.split()[0] for line in body] == list_encodings()
    for line in body:
        want = _expected(line.split()[0])
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        assert cells == [want["name"], want["family"], ", ".join(want["hooks"]),
                         want["extrapolates"], want["kv_cache"], ", ".join(want["backends"])]


def test_list_table_then_shows_every_named_plan(capsys):
    assert main(["list", "--wide"]) == 0
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    first = lines.index("")
    plans = lines[first + 1:lines.index("", first + 1)]
    assert plans[0] == PLANS_HEADING
    header, rule, body, footnote = plans[1], plans[2], plans[3:-1], plans[-1]
    starts = [header.index(col) for col in ("plan", "summary", "options")]
    assert starts == sorted(starts) and starts[0] == 0
    assert set(rule.replace(" ", "")) == {"-"}
    assert [line.split()[0] for line in body] == list(NAMED_PLANS)
    for line, row in zip(body, describe_plans()):
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        assert cells[:2] == [row["name"], row["summary"]]
        assert [part.split("=")[0] for part in cells[2].split(", ")] == list(row["options"])
    by_name = {line.split()[0]: line for line in body}
    assert "window=auto" in by_name["gemma3"] and "global_theta=1000000" in by_name["gemma3"]
    assert "every=4" in by_name["smollm3"]
    assert "chunk=auto" in by_name["llama4"] and "nope_options={}" in by_name["llama4"]
    assert footnote.startswith("(auto: derived from the model's max_len")


def test_list_rejects_unknown_arguments(capsys):
    try:
        main(["list", "--yaml"])
    except SystemExit as exit_:
        assert exit_.code == 2
    else:
        raise AssertionError("argparse accepted --yaml")
    assert "--yaml" in capsys.readouterr().err


def test_list_ends_with_the_lab_variants(capsys):
    from posenc.cli.cmd_list import VARIANTS_HEADING
    from posenc.lab.runs.variants import VARIANTS
    assert main(["list", "--wide"]) == 0
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    table = lines[lines.index(VARIANTS_HEADING) + 1:]
    assert table[0].split() == ["variant", "encoding", "summary"]
    assert [line.split()[0] for line in table[2:]] == list(VARIANTS)


def test_list_prints_every_registered_method_with_its_source(capsys):
    from posenc.cli.cmd_list import METHODS_HEADING
    from posenc.methods import list_methods, method_class
    assert main(["list", "--wide"]) == 0
    lines = capsys.readouterr().out.split("\n")
    start = lines.index(METHODS_HEADING) + 1
    assert lines[start].split()[:2] == ["method", "kind"]
    rows = lines[start + 2:start + 2 + len(list_methods())]
    assert [row.split()[0] for row in rows] == list_methods()
    for row in rows[1:]:
        assert method_class(row.split()[0]).citation.short() in row
    assert "  self_extend: window, group" in lines


def test_list_fits_100_columns_by_default_and_wide_keeps_one_line_per_row(capsys):
    """Every line of the default output fits 100 characters; a long cell wraps inside its
    column and holds the same text as in ``--wide``, where each encoding is one line."""
    assert main(["list"]) == 0
    narrow = capsys.readouterr().out.rstrip("\n").split("\n")
    assert max(len(line) for line in narrow) <= 100
    assert main(["list", "--wide"]) == 0
    wide = capsys.readouterr().out.rstrip("\n").split("\n")
    assert max(len(line) for line in wide) > 100            # the full table does not fit
    body = wide[2:wide.index("")]
    assert len(body) == len(list_encodings())
    rows, end = [], narrow.index("")
    for line in narrow[2:end]:                              # a row starts with its name
        if line[:1] != " ":
            rows.append([])
        rows[-1].append(line)
    assert [r[0].split()[0] for r in rows] == list_encodings()
    squeeze = lambda text: "".join(text.split())
    for row, line in zip(rows, body):                       # the same characters, wrapped
        assert sorted(squeeze(" ".join(row))) == sorted(squeeze(line))
