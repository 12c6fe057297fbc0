"""Fixtures of the posenc.hf tests: one intra-op thread, and token ids for the tiny models."""

import pytest
import torch

from tests.hf.helpers import T, VOCAB


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models run fastest on one thread (two spin-waiting threads lose on a busy box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(2))
