"""RULER's string-match scores on hand-made predictions (the values RULER's own metric gives
them, divided by 100)."""

from __future__ import annotations

import pytest

from posenc.hf.ruler.scoring import clean_prediction, string_match_all, string_match_part


@pytest.mark.parametrize("prediction,references,all_,part", [
    (" 1234567, 7654321 and 1111111.", ("1234567", "7654321", "1111111"), 1.0, 1.0),
    ("The numbers are 1234567 and 2222222", ("1234567", "7654321", "1111111"), 1 / 3, 1.0),
    ("nothing here", ("1234567", "7654321"), 0.0, 0.0),
    ("they are: abcde FGHIJ", ("ABCDE", "fghij"), 1.0, 1.0),          # case is ignored
    ("1. apple 2. pear", ("apple", "pear", "plum", "fig"), 0.5, 1.0),
    ("\x00 1234567\x1f", ("1234567",), 1.0, 1.0),
])
def test_all_counts_the_share_of_references_and_part_any_one(prediction, references, all_,
                                                             part):
    assert string_match_all(prediction, references) == pytest.approx(all_)
    assert string_match_part(prediction, references) == part


def test_a_reference_split_by_a_control_character_is_not_found():
    assert clean_prediction("  12\t34 ") == "12\n34"
    assert string_match_all("12\t34", ("12 34",)) == 0.0


def test_a_sample_without_references_is_a_bug():
    with pytest.raises(ValueError):
        string_match_all("x", ())
