"""Batches: windows that depend on the seed and the step and are sharded by rank, data
shorter than the training length, prepare_data for a task and for a corpus, and packed
documents (the same windows with document ids, the next document's first token unscored)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.data import batches, corpora
from posenc.data.batches import prepare_data, sample_windows, task_batch
from posenc.data.synthetic import IGNORE
from posenc.data.tokenizer import build_tokenizer
from tests.data.helpers import write_files, write_short_files
from tests.helpers import raises_one_line


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


def test_prepare_data_for_task_and_corpus(tmp_path):
    d = prepare_data(None, "byte", "reverse", 20, tmp_path)
    assert d.corpus_info["name"] == "task:reverse" and d.train is None
    b = d.batch(3, 20, seed=0, step=0)
    assert b.inputs.shape == (3, 20) and (b.targets == IGNORE).any()
    assert b.document_ids is None and not d.packed
    c = prepare_data(str(write_files(tmp_path / "docs", 40)), "byte", None, 16, tmp_path)
    assert c.validation_set(4, 16, seed=0).inputs.shape == (4, 16)
    assert isinstance(c.train, np.memmap) and batches.check_stream_length(c.train, 16) is None
    assert corpora.Corpus.__dataclass_params__.frozen
    assert build_tokenizer("byte", None, tmp_path).vocab_size == 256


# ------------------------------------------------------------ packed documents
@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    folder = write_short_files(root / "docs", 60)
    return (prepare_data(str(folder), "byte", None, 16, root / "cache", pack=True),
            prepare_data(str(folder), "byte", None, 16, root / "cache"))


def check_packed_window(batch, plain, stream, starts, window_starts, sep_id):
    """Row by row: the packed batch differs from the plain one only by its document ids and
    by the ignored targets, which are exactly those of a document's last token."""
    torch.testing.assert_close(batch.inputs, plain.inputs, rtol=0, atol=0)
    length = batch.inputs.shape[1]
    doc_starts = set(starts.tolist())
    for row, s in enumerate(window_starts.tolist()):
        ids = batch.document_ids[row].tolist()
        assert ids[0] == 0
        for t in range(1, length):                       # ids change exactly at a start
            assert (ids[t] != ids[t - 1]) == (s + t in doc_starts)
        for t in range(length):                          # a document's last token
            last = s + t + 1 in doc_starts
            assert (batch.targets[row, t] == IGNORE) == last
            assert last == (batch.targets[row, t] != plain.targets[row, t])
            if last:
                assert batch.inputs[row, t] == sep_id == stream[s + t]


def test_packed_windows_mark_documents_and_ignore_their_last_targets(packed):
    data, plain = packed
    assert data.packed and not plain.packed
    crossings = 0
    for step in range(6):
        b = data.batch(4, 16, seed=3, step=step)
        assert b.document_ids.shape == (4, 16) and b.document_ids.dtype == torch.long
        starts = batches.sample_starts(len(data.train), 4, 16, 3, step)
        check_packed_window(b, plain.batch(4, 16, seed=3, step=step), data.train,
                            data.train_documents, starts, data.tokenizer.sep_id)
        crossings += int((b.document_ids[:, -1] > 0).sum())
    assert crossings >= 12                                 # most windows span documents
    v, vp = data.validation_set(5, 16, seed=3), plain.validation_set(5, 16, seed=3)
    check_packed_window(v, vp, data.validation, data.validation_documents,
                        batches.fixed_starts(len(data.validation), 5, 16),
                        data.tokenizer.sep_id)
    assert (v.targets == IGNORE).any()


def test_packed_shards_concatenate_to_the_single_process_batch(packed):
    data, _ = packed
    whole = data.batch(4, 16, seed=1, step=7)
    shards = [data.batch(2, 16, seed=1, step=7, rank=r, world_size=2) for r in (0, 1)]
    for field in ("inputs", "targets", "document_ids"):
        torch.testing.assert_close(torch.cat([getattr(s, field) for s in shards]),
                                   getattr(whole, field), rtol=0, atol=0)
    part = whole.rows(1, 3)
    assert part.document_ids.shape == (2, 16) and part.to("cpu").inputs.shape == (2, 16)


def test_packing_a_task_is_refused(tmp_path):
    raises_one_line("examples of task 'copy' are single documents already", prepare_data,
                    None, "byte", "copy", 16, tmp_path, pack=True)
