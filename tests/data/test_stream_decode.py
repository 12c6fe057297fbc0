"""Streaming decoding: a character split across tokens comes out once, whole; the pieces
always join to the tokenizer's own decoding (byte-level and BPE, valid and invalid UTF-8)."""

from __future__ import annotations

import random

import pytest

from posenc.data.stream_decode import StreamDecoder
from posenc.data.tokenizer import SEPARATOR, BPETokenizer, ByteTokenizer, _train_bpe

TEXT = "the cat sat on the mat: café, naïve, 数据, 日本語 🙂🙂!\n"


@pytest.fixture(scope="module")
def bpe():
    """A small BPE that merged ASCII and a few characters of TEXT (some of 数据, 🙂), so
    other characters of TEXT take several tokens, some of them more than one byte."""
    return BPETokenizer(_train_bpe(["the cat sat on the mat " * 20, "数据 🙂 " * 5] * 5, 300),
                        "bpe:300")


def pieces(tokenizer, ids, context=()):
    decoder = StreamDecoder(tokenizer, context)
    out = [(i, decoder.push(t)) for i, t in enumerate(ids)]
    return [(i, p) for i, p in out if p], decoder.finish()


def test_bytes_of_one_character_come_out_once_whole():
    tok = ByteTokenizer()
    got, rest = pieces(tok, tok.encode("aé数🙂b"))
    # a(1 byte) é(2) 数(3) 🙂(4) b(1): each character at its last byte, nothing partial
    assert got == [(0, "a"), (2, "é"), (5, "数"), (9, "🙂"), (10, "b")] and rest == ""


def test_a_partial_character_at_the_end_is_replaced_once_finished():
    tok = ByteTokenizer()
    got, rest = pieces(tok, list("ok".encode()) + list("🙂".encode())[:3])
    assert got == [(0, "o"), (1, "k")] and rest == "\ufffd"
    got, rest = pieces(tok, [0xE6, 0x41, 0x80, 0x42])    # invalid bytes, then ASCII
    assert "".join(p for _, p in got) + rest == "\ufffdA\ufffdB" == tok.decode([0xE6, 0x41,
                                                                                 0x80, 0x42])


@pytest.mark.parametrize("seed", range(40))
def test_pieces_join_to_the_byte_decoding_of_any_bytes(seed):
    rng = random.Random(seed)
    tok = ByteTokenizer()
    context = tok.encode(rng.choice(["", "x", "数据", "a🙂"]))
    ids = [rng.choice([rng.randrange(256), *TEXT.encode()]) for _ in range(rng.randrange(40))]
    got, rest = pieces(tok, ids, context)
    text = "".join(p for _, p in got) + rest
    assert text == tok.decode(ids)
    assert tok.decode(context) + text == tok.decode(context + ids)
    assert all("\ufffd" not in p for _, p in got) or "\ufffd" in tok.decode(ids)


def test_bpe_tokens_that_split_a_character_are_held_until_it_is_whole(bpe):
    ids = bpe.encode(TEXT)
    partial = [i for i in ids if "\ufffd" in bpe.decode([i])]
    assert any(len(bpe._tok.id_to_token(i)) > 1 for i in partial)   # 2 bytes of 4 of 🙂
    got, rest = pieces(bpe, ids, bpe.encode("prompt: "))
    assert "".join(p for _, p in got) + rest == TEXT and rest == ""
    assert all("\ufffd" not in p for _, p in got)


@pytest.mark.parametrize("seed", range(20))
def test_pieces_join_to_the_bpe_decoding_of_any_tokens(bpe, seed):
    rng = random.Random(seed)
    context = bpe.encode(rng.choice(["the ", "数", "🙂 x"]))
    ids = [rng.randrange(bpe.vocab_size) for _ in range(rng.randrange(30))]
    got, rest = pieces(bpe, ids, context)
    assert "".join(p for _, p in got) + rest == bpe.decode(ids)


def test_the_separator_decodes_as_the_tokenizer_decodes_it(bpe):
    ids = bpe.encode("the cat") + [bpe.sep_id] + bpe.encode("mat")
    got, rest = pieces(bpe, ids)
    assert "".join(p for _, p in got) + rest == bpe.decode(ids) == "the catmat"
    assert SEPARATOR not in bpe.decode(ids)
