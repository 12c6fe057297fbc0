"""Fine-tuning a Hugging Face model lowers its loss; its config is checked."""

from __future__ import annotations

import pytest
import torch

from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.hf.finetune import FinetuneConfig, finetune  # noqa: E402


def test_finetune_lowers_the_loss():
    model = _model(_config())
    stream = torch.arange(400) % 7                  # a pattern a tiny model learns fast
    losses = finetune(model, stream, FinetuneConfig(steps=12, length=64, lr=3e-3))
    assert len(losses) == 12 and losses[-1] < 0.5 * losses[0]
    assert not model.training
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        FinetuneConfig(steps=0, length=64)
