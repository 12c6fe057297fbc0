"""Corpora, the token cache, window sampling and synthetic tasks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.data import batches, cache, corpora
from posenc.data.batches import prepare_data, sample_windows, task_batch
from posenc.data.corpora import SPLITS, load_corpus, split_of, stdlib_files, stdlib_root
from posenc.data.synthetic import IGNORE, TASKS, make_task, min_length
from posenc.data.tokenizer import ByteTokenizer, build_tokenizer


def write_files(folder, n, size=400):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"doc{i:03d}.txt").write_text(f"document {i}\n" + "abc def\n" * (size // 8))
    return folder


# ------------------------------------------------------------------ corpora
def test_stdlib_corpus_is_deterministic_and_split_by_file():
    files = stdlib_files()
    rel = [p.relative_to(stdlib_root()).as_posix() for p in files]
    assert rel == sorted(rel) and len(rel) > 300
    assert not any(part in ("site-packages", "test", "tests", "idle_test")
                   for r in rel for part in r.split("/"))
    assert not any(r.rsplit("/", 1)[-1].startswith("_sysconfigdata") for r in rel)
    a, b = load_corpus(), load_corpus("stdlib")
    assert a.sha256 == b.sha256 and len(a.sha256) == 64
    assert a.info() == {"name": "stdlib", "python_version": a.python_version,
                        "sha256": a.sha256}
    assert a.split_by == "document"
    by_name = {r: t for r, t in zip(rel, (p.read_text(encoding="utf-8") for p in files))
               if t.strip()}                                # empty __init__.py files are out
    sizes = {s: len(a.texts(s)) for s in SPLITS}
    assert sum(sizes.values()) == len(by_name)
    assert sizes["train"] > 10 * sizes["validation"] > 0 and sizes["test"] > 0
    expected_val = [t for r, t in by_name.items() if split_of(r) == "validation"]
    assert a.texts("validation") == expected_val


def test_folder_corpus_split_by_file_and_hash_tracks_content(tmp_path):
    folder = write_files(tmp_path / "docs", 60)
    c = load_corpus(str(folder))
    assert c.split_by == "document" and c.n_skipped == 0
    assert sum(len(c.texts(s)) for s in SPLITS) == 60
    expected = {s: [(folder / f"doc{i:03d}.txt").read_text() for i in range(60)
                    if split_of(f"doc{i:03d}.txt") == s] for s in SPLITS}
    assert {s: c.texts(s) for s in SPLITS} == expected
    (folder / "doc000.txt").write_text("changed\n")
    assert load_corpus(str(folder)).sha256 != c.sha256


def test_when_hash_buckets_leave_a_split_empty_documents_are_ranked(tmp_path):
    folder = write_files(tmp_path / "docs", 10)
    names = [f"doc{i:03d}.txt" for i in range(10)]
    assert not any(split_of(n) == "validation" for n in names)  # bucket rule: none
    ranked = sorted(names, key=lambda n: corpora._name_hash(n))
    c = load_corpus(str(folder))
    assert c.split_by == "document"
    assert c.texts("validation") == [(folder / ranked[8]).read_text()]
    assert c.texts("test") == [(folder / ranked[9]).read_text()]
    assert len(c.texts("train")) == 8


def test_few_files_are_split_by_line_and_binary_files_skipped(tmp_path):
    folder = write_files(tmp_path / "docs", 2, size=800)
    (folder / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    (folder / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (folder / ".hidden.txt").write_text("never read")
    c = load_corpus(str(folder))
    assert c.split_by == "line" and c.n_skipped == 2
    joined = {s: "".join(c.texts(s)) for s in SPLITS}
    assert all(joined.values())
    assert "never read" not in "".join(joined.values())
    assert sum(len(v) for v in joined.values()) == sum(
        len((folder / f"doc{i:03d}.txt").read_text()) for i in range(2))


def test_single_file_corpus(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("".join(f"line {i}\n" for i in range(200)))
    c = load_corpus(str(f))
    assert "".join(c.texts("train") + c.texts("validation") + c.texts("test")) == f.read_text()
    assert c.texts("test")[0].startswith("line 190")


@pytest.mark.parametrize("make", ["empty_dir", "blank_file", "only_binary"])
def test_empty_corpus_is_an_error(tmp_path, make):
    path = tmp_path / "data"
    if make == "empty_dir":
        path.mkdir()
    elif make == "blank_file":
        path.write_text("  \n\n")
    else:
        path.mkdir()
        (path / "x.bin").write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="empty"):
        load_corpus(str(path))


def test_missing_path_and_bad_split(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_corpus(str(tmp_path / "nope"))
    c = load_corpus(str(write_files(tmp_path / "d", 30)))
    with pytest.raises(ValueError, match="valid: train, validation, test"):
        c.texts("dev")


def test_local_hf_dataset_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [f"row number {i} " * 5 for i in range(80)]
    datasets.Dataset.from_dict({"text": rows, "id": list(range(80))}).save_to_disk(
        str(tmp_path / "ds"))
    c = load_corpus(str(tmp_path / "ds"))
    assert sorted(t for s in SPLITS for t in c.texts(s)) == sorted(rows)
    assert c.split_by == "document" and c.texts("test") and c.texts("validation")
    dd = datasets.DatasetDict({s: datasets.Dataset.from_dict({"content": [f"{s} {i}" for i
                                                                          in range(3)]})
                               for s in ("train", "validation", "test")})
    dd.save_to_disk(str(tmp_path / "dd"))
    c2 = load_corpus(str(tmp_path / "dd"))
    assert c2.texts("test") == ["test 0", "test 1", "test 2"]
    assert c2.sha256 != c.sha256


def test_hub_dataset_without_network_is_a_clear_error(monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/data' on the Hub (offline)\nmore")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match=r"cannot load Hugging Face dataset 'someone/data'"
                                         r": Couldn't reach.*\(offline\)$"):
        load_corpus("hf:someone/data")
    with pytest.raises(ValueError, match="hf:NAME"):
        load_corpus("hf:")


# -------------------------------------------------------------- token cache
def test_token_stream_is_cached_memmap_and_not_retokenized(tmp_path, monkeypatch):
    c = load_corpus(str(write_files(tmp_path / "docs", 40)))
    tok = ByteTokenizer()
    first = cache.token_stream(c, tok, "train", tmp_path / "cache")
    assert isinstance(first, np.memmap) and first.dtype == np.uint16 and first.ndim == 1
    expected = b"".join(t.encode() + b"\0" for t in c.texts("train"))
    np.testing.assert_array_equal(first, np.frombuffer(expected, dtype=np.uint8))
    files = sorted(p.name for p in (tmp_path / "cache" / "tokens").iterdir())
    name = f"{c.sha256[:16]}-byte-train.npy"
    assert files == [name, name + ".sha256"]                       # no temporary file left

    def boom(*a, **k):
        raise AssertionError("re-tokenized")

    monkeypatch.setattr(cache, "encode_documents", boom)
    again = cache.token_stream(c, tok, "train", tmp_path / "cache")
    np.testing.assert_array_equal(again, first)
    with pytest.raises(AssertionError, match="re-tokenized"):      # another split is new
        cache.token_stream(c, tok, "test", tmp_path / "cache")


def test_token_cache_default_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "pc"))
    assert cache.default_cache_dir() == tmp_path / "pc"
    c = load_corpus(str(write_files(tmp_path / "docs", 40)))
    cache.token_stream(c, ByteTokenizer(), "validation")
    assert (tmp_path / "pc" / "tokens" / f"{c.sha256[:16]}-byte-validation.npy").is_file()


# ------------------------------------------------------------------ batches
def test_windows_depend_on_seed_and_step_and_shard_by_rank():
    stream = np.arange(1000, dtype=np.uint16)
    x, y = sample_windows(stream, 4, 16, seed=1, step=5)
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    torch.testing.assert_close(y[:, :-1], x[:, 1:])
    torch.testing.assert_close(x[:, 1:] - x[:, :-1], torch.ones(4, 15, dtype=torch.long))
    x2, _ = sample_windows(stream, 4, 16, seed=1, step=5)
    torch.testing.assert_close(x, x2)
    assert not torch.equal(x, sample_windows(stream, 4, 16, seed=1, step=6)[0])
    assert not torch.equal(x, sample_windows(stream, 4, 16, seed=2, step=5)[0])
    r0, _ = sample_windows(stream, 2, 16, seed=1, step=5, rank=0, world_size=2)
    r1, _ = sample_windows(stream, 2, 16, seed=1, step=5, rank=1, world_size=2)
    torch.testing.assert_close(torch.cat([r0, r1]), x)
    t0, _ = task_batch("copy", 2, 12, 0, 3, rank=0, world_size=2)
    t1, _ = task_batch("copy", 2, 12, 0, 3, rank=1, world_size=2)
    torch.testing.assert_close(torch.cat([t0, t1]), task_batch("copy", 4, 12, 0, 3)[0])


def test_training_length_larger_than_data(tmp_path):
    with pytest.raises(ValueError, match="training length 100 is larger than the data"):
        sample_windows(np.arange(50), 2, 100, seed=0, step=0)
    f = tmp_path / "small.txt"
    f.write_text("".join(f"l{i}\n" for i in range(100)))
    with pytest.raises(ValueError, match="the validation split has"):
        prepare_data(str(f), "byte", None, 64, tmp_path / "cache")


# ----------------------------------------------------------- synthetic tasks
def text(row):
    return bytes(int(i) for i in row).decode("ascii")


def answer(batch, i):
    keep = batch.targets[i] != IGNORE
    return text(batch.targets[i][keep])


@pytest.mark.parametrize("length", [9, 40, 301])
def test_copy_reverse_addition_answers(length):
    for name in ("copy", "reverse", "addition"):
        b = make_task(name, 5, length, seed=3)
        assert b.inputs.shape == b.targets.shape == (5, length) and b.depths is None
        for i in range(5):
            full = text(b.inputs[i]) + text(b.targets[i][-1:])
            question, ans = full.lstrip("#").split("=")
            assert answer(b, i) == ans                      # exactly the answer is scored
            if name == "copy":
                assert ans == question and len(ans) == length // 2
            elif name == "reverse":
                assert ans == question[::-1]
            else:
                a, c = question.split("+")
                assert int(a) + int(c) == int(ans) and len(ans) == len(a) + 1
        torch.testing.assert_close(b.inputs, make_task(name, 5, length, seed=3).inputs)
        assert not torch.equal(b.inputs, make_task(name, 5, length, seed=4).inputs)


def test_passkey_hides_the_key_at_the_depth():
    for depth in (0.0, 0.5, 1.0):
        b = make_task("passkey", 3, 500, seed=0, depth=depth)
        for i in range(3):
            full = text(b.inputs[i]) + text(b.targets[i][-1:])
            key = answer(b, i)
            assert len(key) == 5 and key.isdigit()
            assert full.endswith("What is the pass key? The pass key is " + key)
            at = full.index(f"The pass key is {key}.")
            assert abs(at / 500 - depth * (500 - 100) / 500) < 0.05
        torch.testing.assert_close(b.depths, torch.full((3,), depth), atol=0.005, rtol=0)
    r = make_task("passkey", 20, 300, seed=1, key_digits=3)
    assert len(answer(r, 0)) == 3 and r.depths.std() > 0.1


def test_task_arguments_are_validated():
    with pytest.raises(ValueError, match="valid tasks: copy, reverse, addition, passkey, recall"):
        make_task("sort", 2, 10, 0)
    with pytest.raises(ValueError, match=r"length for task 'addition' must be an int >= 5"):
        make_task("addition", 2, 4, 0)
    with pytest.raises(ValueError, match=r"must be an int >= "):
        make_task("passkey", 2, min_length("passkey") - 1, 0)
    make_task("passkey", 1, min_length("passkey"), 0)
    with pytest.raises(ValueError, match="passkey task, not 'copy'"):
        make_task("copy", 2, 10, 0, depth=0.5)
    with pytest.raises(ValueError, match=r"depth must be in \[0, 1\]"):
        make_task("passkey", 2, 200, 0, depth=1.5)
    assert TASKS == ("copy", "reverse", "addition", "passkey", "recall")
    with pytest.raises(ValueError, match=r"length for task 'recall' must be an int >= 4"):
        make_task("recall", 2, 3, 0)


@pytest.mark.parametrize("length", [4, 9, 20, 130])
def test_recall_asks_for_the_value_of_a_listed_key(length):
    b = make_task("recall", 50, length, seed=5)
    assert b.inputs.shape == b.targets.shape == (50, length)
    n_pairs = (length - 2) // 2
    for i in range(50):
        full = text(b.inputs[i]) + answer(b, i)
        pairs, question = full.lstrip("#").split("=")
        assert len(pairs) == 2 * n_pairs and len(question) == 2 and answer(b, i).isdigit()
        mapping = {}
        for key, value in zip(pairs[::2], pairs[1::2]):
            assert key.islower() and value.isdigit()
            assert mapping.setdefault(key, value) == value     # a key keeps its value
        if n_pairs <= 26:
            assert len(mapping) == n_pairs                     # distinct keys while they last
        assert mapping[question[0]] == question[1]             # the scored token is its value
    where = {text(b.inputs[i]).lstrip("#").index(text(b.inputs[i])[-1]) for i in range(50)}
    assert len(where) > 1 or n_pairs == 1                      # any listed pair is asked


@pytest.mark.parametrize("name", ["reverse", "sort"])
def test_seq2seq_tasks_bracket_the_answer_with_bos_and_eos(name):
    from posenc.data.synthetic import BOS, EOS, make_seq2seq_task
    b = make_seq2seq_task(name, 6, 7, seed=2)
    assert b.src.shape == (6, 7) and b.tgt.shape == (6, 9) and b.length == 7
    assert (b.tgt[:, 0] == BOS).all() and (b.tgt[:, -1] == EOS).all()
    for src, tgt in zip(b.src, b.tgt):
        want = text(src)[::-1] if name == "reverse" else "".join(sorted(text(src)))
        assert text(tgt[1:-1]) == want
    torch.testing.assert_close(b.src, make_seq2seq_task(name, 6, 7, seed=2).src)
    assert not torch.equal(b.src, make_seq2seq_task(name, 6, 7, seed=3).src)
    with pytest.raises(ValueError, match="valid tasks: reverse, sort"):
        make_seq2seq_task("copy", 2, 4, 0)
    with pytest.raises(ValueError, match="length must be a positive int"):
        make_seq2seq_task(name, 2, 0, 0)


def test_prepare_data_for_task_and_corpus(tmp_path):
    d = prepare_data(None, "byte", "reverse", 20, tmp_path)
    assert d.corpus_info["name"] == "task:reverse" and d.train is None
    x, y = d.batch(3, 20, seed=0, step=0)
    assert x.shape == (3, 20) and (y == IGNORE).any()
    c = prepare_data(str(write_files(tmp_path / "docs", 40)), "byte", None, 16, tmp_path)
    vx, _ = c.validation_set(4, 16, seed=0)
    assert vx.shape == (4, 16)
    assert isinstance(c.train, np.memmap) and batches.check_stream_length(c.train, 16) is None
    assert corpora.Corpus.__dataclass_params__.frozen
    assert build_tokenizer("byte", None, tmp_path).vocab_size == 256
