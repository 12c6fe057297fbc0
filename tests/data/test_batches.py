"""Batches: windows that depend on the seed and the step and are sharded by rank, data
shorter than the training length, and prepare_data for a task and for a corpus."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.data import batches, corpora
from posenc.data.batches import prepare_data, sample_windows, task_batch
from posenc.data.synthetic import IGNORE
from posenc.data.tokenizer import build_tokenizer

from tests.data.helpers import write_files


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
    x, y = d.batch(3, 20, seed=0, step=0)
    assert x.shape == (3, 20) and (y == IGNORE).any()
    c = prepare_data(str(write_files(tmp_path / "docs", 40)), "byte", None, 16, tmp_path)
    vx, _ = c.validation_set(4, 16, seed=0)
    assert vx.shape == (4, 16)
    assert isinstance(c.train, np.memmap) and batches.check_stream_length(c.train, 16) is None
    assert corpora.Corpus.__dataclass_params__.frozen
    assert build_tokenizer("byte", None, tmp_path).vocab_size == 256
