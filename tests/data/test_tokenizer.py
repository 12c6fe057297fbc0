"""Byte-level and BPE tokenizers: round trips, saving, loading and reuse from the cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from posenc.data import cache, tokenizer
from posenc.data.corpora import load_corpus
from posenc.data.tokenizer import (
    ByteTokenizer,
    build_tokenizer,
    load_tokenizer,
    parse_spec,
)

TEXT = "def f(x):\n    return x ** 2  # café, 数据, 🙂\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("code")
    for i in range(30):
        body = "".join(f"def func_{i}_{j}(value):\n    return value + {j}\n\n"
                       for j in range(20))
        (folder / f"m{i:02d}.py").write_text(f"# module {i}\nimport os\n\n{body}")
    return load_corpus(str(folder))


def test_byte_tokenizer_round_trip_and_save(tmp_path):
    tok = ByteTokenizer()
    ids = tok.encode(TEXT)
    assert ids == list(TEXT.encode("utf-8")) and tok.vocab_size == 256 and tok.sep_id == 0
    assert tok.decode(ids) == TEXT
    assert tok.decode(ids[:-3]).endswith(" \ufffd")         # a cut emoji is replaced
    with pytest.raises(ValueError, match=r"must be in \[0, 256\), got 300"):
        tok.decode([65, 300])
    tok.save(tmp_path / "t")
    again = load_tokenizer(tmp_path / "t")
    assert isinstance(again, ByteTokenizer) and again.encode(TEXT) == ids


def test_specs_are_validated():
    assert parse_spec("byte") == ("byte", None)
    assert parse_spec("bpe:4096") == ("bpe", 4096)
    for bad, msg in [("bpe", "bpe:N needs N"), ("bpe:12", "bpe:N needs N"),
                     ("bpe:x", "bpe:N needs N"), ("wordpiece", "valid: byte, bpe:N")]:
        with pytest.raises(ValueError, match=msg):
            parse_spec(bad)


def test_bpe_trains_round_trips_and_is_reused_from_cache(corpus, tmp_path, monkeypatch):
    tok = build_tokenizer("bpe:400", corpus, tmp_path)
    assert tok.spec == "bpe:400" and 300 < tok.vocab_size <= 400
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT
    code = corpus.texts("train")[0]
    assert len(tok.encode(code)) < len(code.encode()) / 2    # merges learned from the corpus
    cached = list((tmp_path / "tokenizers").iterdir())
    assert [p.name for p in cached] == [f"{corpus.sha256[:16]}-bpe400"]

    def no_training(*a, **k):
        raise AssertionError("trained again")

    monkeypatch.setattr(tokenizer, "_train_bpe", no_training)
    reused = build_tokenizer("bpe:400", corpus, tmp_path)
    assert reused.fingerprint == tok.fingerprint and reused.encode(code) == tok.encode(code)
    reused.save(tmp_path / "run_tok")
    loaded = load_tokenizer(tmp_path / "run_tok")
    assert loaded.fingerprint == tok.fingerprint and loaded.sep_id == tok.sep_id
    stream = cache.token_stream(corpus, loaded, "validation", tmp_path)
    expected = [i for t in corpus.texts("validation") for i in [*tok.encode(t), tok.sep_id]]
    np.testing.assert_array_equal(stream, np.array(expected))
    with pytest.raises(AssertionError, match="trained again"):
        build_tokenizer("bpe:300", corpus, tmp_path)            # another size is new


def test_unreadable_tokenizer_dir_is_one_line_value_error(tmp_path):
    with pytest.raises(ValueError, match="cannot load tokenizer from .*: "):
        load_tokenizer(tmp_path / "missing")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "tokenizer_config.json").write_text(json.dumps({"spec": "bpe:500"}))
    (tmp_path / "t" / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot load tokenizer") as err:
        load_tokenizer(tmp_path / "t")
    assert "\n" not in str(err.value)
