"""The one markdown table helper and the one verdict type."""

from __future__ import annotations

import pytest

from posenc.study import SUPPORTED, Verdict, markdown_table


def test_table_lines():
    assert markdown_table(["a", "b"], [["1", "2"], [3, 4]]) == [
        "| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]


def test_table_refuses_a_ragged_row():
    with pytest.raises(ValueError, match="2 cells"):
        markdown_table(["a"], [["1", "2"]])


def test_verdict_checks_its_status_and_serialises():
    v = Verdict("x beats y", "A et al. (2020), Table 1", SUPPORTED, "1.0 vs 2.0")
    assert v.to_dict() == {"claim": "x beats y", "source": "A et al. (2020), Table 1",
                           "verdict": "supported", "evidence": "1.0 vs 2.0", "rule": ""}
    with pytest.raises(ValueError, match="verdict must be one of"):
        Verdict("c", "s", "probably", "e")
