"""Shared by the training tests."""

from __future__ import annotations

from posenc.models import LMConfig
from posenc.train import TrainConfig
from tests.helpers import make_corpus


def tiny(tmp_path, **kw):
    """A 6-step run of a one-layer model on a small corpus in tmp_path; ``model``: LMConfig
    fields, the rest TrainConfig fields."""
    model = kw.pop("model", {})
    model = LMConfig(**{"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 16,
                        "d_ff": 64, "pe": "rope", **model})
    base = {"data": str(make_corpus(tmp_path / "data")), "train_len": 16, "batch_size": 4,
            "steps": 6, "checkpoint_every": 3, "eval_windows": 4,
            "cache_dir": str(tmp_path / "cache"), "device": "cpu"}
    return TrainConfig(model=model, **{**base, **kw})
