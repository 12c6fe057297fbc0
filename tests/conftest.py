"""Shared fixtures: fixed seeds, one intra-op thread, and tiny models whose outputs depend
strongly on positions (the functions behind them are in tests/helpers.py)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import tiny_lm_factory


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="module")
def single_thread():
    """One intra-op thread for a module of tiny-model tests (opt in with
    ``pytestmark = pytest.mark.usefixtures("single_thread")``): tiny tensors gain nothing
    from threads, and on a busy 2-core machine OpenMP threads contend so badly that each
    forward pass gets 10-50x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_lm():
    """Factory: ``tiny_lm(pe, pe_options, max_len=..., ...) -> TransformerLM`` (eval mode)."""
    return tiny_lm_factory
