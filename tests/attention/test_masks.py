"""Visibility from lengths and masks: causal with the queries at the end of the keys,
padding hidden from every query (a padding query sees its own key only), packed documents
block-diagonal."""

from __future__ import annotations

import torch

from posenc.attention.masks import Masks, additive, causal_visible, visibility


def test_causal_queries_are_the_last_keys():
    assert causal_visible(2, 4, "cpu").tolist() == [[True, True, True, False],
                                                    [True, True, True, True]]
    assert visibility(3, 3, "cpu", causal=False) is None
    assert visibility(1, 5, "cpu", causal=True) is None                # one query: all keys


def test_padding_is_hidden_but_each_query_sees_its_own_key():
    valid = torch.tensor([[False, False, True, True]])
    seen = visibility(4, 4, "cpu", causal=True, key_valid=valid)[0, 0]
    assert seen.tolist() == [[True, False, False, False],      # padding: only itself
                             [False, True, False, False],
                             [False, False, True, False],
                             [False, False, True, True]]
    cross = visibility(2, 4, "cpu", causal=False, key_valid=valid, self_attention=False)
    assert cross[0, 0].tolist() == [[False, False, True, True]] * 2


def test_a_padding_query_sees_no_real_token():
    """Right padding or an encoder's padded source: the padding rows keep their own key."""
    valid = torch.tensor([[True, True, False]])
    assert visibility(3, 3, "cpu", causal=True, key_valid=valid)[0, 0].tolist() == [
        [True, False, False], [True, True, False], [False, False, True]]
    assert visibility(3, 3, "cpu", causal=False, key_valid=valid)[0, 0].tolist() == [
        [True, True, False], [True, True, False], [False, False, True]]
    cached = visibility(1, 3, "cpu", causal=True, key_valid=valid)   # the last query: padding
    assert cached[0, 0].tolist() == [[False, False, True]]


def test_documents_are_block_diagonal():
    documents = torch.tensor([[0, 0, 1, 1, 1]])
    seen = visibility(3, 5, "cpu", causal=True, documents=documents)[0, 0]
    assert seen.tolist() == [[False, False, True, False, False],
                             [False, False, True, True, False],
                             [False, False, True, True, True]]


def test_masks_bundle_and_additive_form():
    masks = Masks(key_valid=torch.tensor([[True, False]]))
    assert masks.any() and not Masks().any()
    seen = masks.visibility(2, 2, "cpu", causal=False)
    assert additive(seen)[0, 0].tolist() == [[0.0, float("-inf")], [float("-inf"), 0.0]]
