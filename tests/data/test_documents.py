"""Document boundaries: starts from lengths and from separators (and when separators are
not enough), the checks of a cached array, and the documents of windows."""

from __future__ import annotations

import numpy as np

from posenc.data.documents import (
    check_starts,
    starts_from_lengths,
    starts_from_separators,
    window_documents,
)

# three documents of 3, 1 and 4 tokens, each ending with the separator 0
STREAM = np.array([5, 6, 0, 0, 7, 8, 9, 0], dtype=np.uint16)
STARTS = np.array([0, 3, 4], dtype=np.int64)


def test_starts_from_lengths_and_from_separators():
    np.testing.assert_array_equal(starts_from_lengths(np.array([3, 1, 4])), STARTS)
    assert starts_from_lengths(np.array([], dtype=np.int64)).shape == (0,)
    found = starts_from_separators(STREAM, 0, 3)
    assert found.dtype == np.int64
    np.testing.assert_array_equal(found, STARTS)
    # a document holding the separator itself: more separators than documents, not exact
    assert starts_from_separators(STREAM, 0, 2) is None
    assert starts_from_separators(STREAM[:-1], 0, 2) is None          # no final separator
    assert starts_from_separators(STREAM, 0, 0) is None


def test_check_starts_names_the_problem():
    assert check_starts(STARTS, len(STREAM), 3) is None
    assert "int64" in check_starts(STARTS.astype(np.int32), len(STREAM), 3)
    assert "2 document starts for 3 documents" in check_starts(STARTS[:2], len(STREAM), 3)
    for bad in ([1, 3, 4], [0, 4, 3], [0, 3, 3], [0, 3, 8]):
        assert "not increasing offsets from 0" in check_starts(
            np.array(bad, dtype=np.int64), len(STREAM), 3)


def test_window_documents_change_at_starts_and_mark_last_tokens():
    ids, last = window_documents(STARTS, np.array([0, 1, 3]), 4)
    # window 0: tokens 0..3 (docs 0,0,0,1), targets 1..4 (doc 0 ends at 2, doc 1 at 3)
    np.testing.assert_array_equal(ids, [[0, 0, 0, 1], [0, 0, 1, 2], [0, 1, 1, 1]])
    np.testing.assert_array_equal(last, [[False, False, True, True],
                                         [False, True, True, False],
                                         [True, False, False, False]])
    ids, last = window_documents(STARTS, np.array([4]), 3)            # the stream's end
    np.testing.assert_array_equal(ids, [[0, 0, 0]])
    np.testing.assert_array_equal(last, [[False, False, False]])
