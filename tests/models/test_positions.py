"""Positions of real batches: counting real tokens (continuing a cache), restarting per
packed document; when their distances are those of the indices; mask and document checks."""

from __future__ import annotations

import pytest
import torch

from posenc.models.positions import (
    check_documents,
    check_mask,
    distances_match_indices,
    positions_from_documents,
    positions_from_mask,
)


def test_positions_count_real_tokens_from_where_each_sequence_stands():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 1, 1, 0]]).bool()
    got = positions_from_mask(mask, torch.tensor([0, 0, 3]))
    assert got.tolist() == [[0, 0, 0, 1, 2],       # left padding: 0 before the first
                            [0, 1, 2, 2, 2],       # right padding repeats the last
                            [3, 3, 4, 5, 5]]       # continuing a cache at 3


def test_positions_restart_in_every_document():
    documents = torch.tensor([[0, 0, 0, 1, 1, 2], [5, 5, 5, 5, 5, 5], [1, 2, 1, 1, 2, 2]])
    assert positions_from_documents(documents).tolist() == [[0, 1, 2, 0, 1, 0],
                                                            [0, 1, 2, 3, 4, 5],
                                                            [0, 0, 0, 1, 0, 1]]


def test_positions_read_nothing_on_the_host():
    mask = torch.ones(2, 3, dtype=torch.bool, device="meta")
    assert positions_from_mask(mask, torch.zeros(2, dtype=torch.long, device="meta")).shape \
        == (2, 3)
    assert positions_from_documents(torch.zeros(2, 3, dtype=torch.long, device="meta")).shape \
        == (2, 3)


def test_masks_and_documents_are_checked():
    assert check_mask("m", torch.tensor([[1, 0]]), (1, 2)).dtype == torch.bool
    with pytest.raises(ValueError, match="m must be an integer or bool tensor"):
        check_mask("m", torch.ones(1, 2), (1, 2))
    with pytest.raises(ValueError, match=r"m must have shape \(1, 3\)"):
        check_mask("m", torch.ones(1, 2, dtype=torch.bool), (1, 3))
    with pytest.raises(ValueError, match="document_ids must be an integer tensor"):
        check_documents(torch.ones(1, 2, dtype=torch.bool), (1, 2))


def test_distances_match_indices_for_contiguous_real_tokens_and_documents_in_runs():
    for contiguous in ([[0, 0, 1, 1], [1, 1, 1, 1]], [[1, 1, 1, 0], [0, 1, 1, 0]],
                       [[0, 0, 0, 0], [1, 0, 0, 0]]):
        assert distances_match_indices(torch.tensor(contiguous).bool(), None)
    for inner in ([[1, 0, 1, 1], [1, 1, 1, 1]], [[1, 1, 1, 1], [0, 1, 0, 1]]):
        assert not distances_match_indices(torch.tensor(inner).bool(), None)
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]).bool()
    runs = torch.tensor([[0, 0, 1, 1, 1], [7, 2, 2, 5, 5]])
    assert distances_match_indices(None, runs)
    assert distances_match_indices(~mask[:, :1].expand(2, 5), runs)   # padding inside runs
    split = torch.tensor([[0, 0, 1, 1, 1], [2, 2, 5, 2, 2]])          # id 2 in two runs
    assert not distances_match_indices(None, split)
    assert not distances_match_indices(None, None)


def test_distances_match_indices_reads_no_device_and_nothing_compiled():
    """Elsewhere than on the CPU the answer would need a host read: it is False."""
    assert not distances_match_indices(torch.ones(2, 3, dtype=torch.bool, device="meta"), None)
    assert not distances_match_indices(None, torch.zeros(2, 3, dtype=torch.long, device="meta"))
    compiled = torch.compile(lambda m: torch.tensor(distances_match_indices(m, None)),
                             backend="eager", fullgraph=True)
    assert not bool(compiled(torch.ones(2, 3, dtype=torch.bool)))


def test_each_run_of_equal_ids_is_its_own_document():
    ids = torch.tensor([[0, 0, 1, 1, 0, 0, 1, 1], [4, 4, 4, 4, 4, 4, 4, 4]])
    assert check_documents(ids, (2, 8)).tolist() == [[0, 0, 1, 1, 2, 2, 3, 3],
                                                     [0, 0, 0, 0, 0, 0, 0, 0]]
    assert check_documents(ids.int(), (2, 8)).dtype == torch.long


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned"])
def test_a_document_id_that_comes_back_starts_a_new_document(tiny_lm, pe):
    """Editing run 1 (id 0) leaves run 3 (id 0 again) alone: it reads as its own document,
    exactly as if it were alone in its row."""
    model = tiny_lm(pe)
    documents = torch.tensor([[0, 0, 1, 1, 0, 0, 1, 1]])
    tokens = torch.randint(0, 48, (1, 8), generator=torch.Generator().manual_seed(3))
    edited = tokens.clone()
    edited[0, :2] = (edited[0, :2] + 7) % 48
    with torch.no_grad():
        a = model(tokens, document_ids=documents)
        b = model(edited, document_ids=documents)
        alone = model(tokens[:, 4:6])
    torch.testing.assert_close(a[:, 4:6], b[:, 4:6], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(a[:, 4:6], alone, rtol=1e-5, atol=1e-5)
