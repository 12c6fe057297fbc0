"""Fixtures of the posenc.hf tests: one intra-op thread, and token ids for the tiny models."""

import pytest
import torch

from tests.hf.helpers import VOCAB, T


@pytest.fixture(autouse=True, scope="module")
def _one_thread(single_thread):
    """Every module here runs tiny models: one intra-op thread (tests/conftest.py)."""


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(2))
