"""The results codec: non-finite floats survive a round trip; bad files are one-line errors."""

from __future__ import annotations

import json
import math

import pytest

from posenc.errors import UserError
from posenc.study import decode, dumps, encode, read_json


def test_round_trip_keeps_non_finite_numbers_tuples_and_keys():
    obj = {"ppl": {64: 3.5, 128: math.inf}, "loss": -math.inf, "x": math.nan,
           "pair": (1, 2), "ok": True, "none": None}
    text = dumps(obj).decode()
    assert text.endswith("\n") and "NaN" not in text and "Infinity" not in text
    back = decode(json.loads(text))
    assert back["ppl"] == {"64": 3.5, "128": math.inf}
    assert back["loss"] == -math.inf and math.isnan(back["x"])
    assert back["pair"] == [1, 2] and back["ok"] is True and back["none"] is None


def test_encode_names_what_json_cannot_hold():
    assert encode({"p": object.__new__(type("Thing", (), {"__str__": lambda s: "thing"}))}
                  ) == {"p": "thing"}


def test_read_json_names_the_file(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match=r"results.json is not a valid results file"):
        read_json(bad)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="not UTF-8"):
        read_json(bad)
