"""DroPE on a pretrained Hugging Face model (Gelberg et al. 2026): ``extend(model, "drope")``
removes the rotary of every layer, attention stays causal, and the recalibration (the
fine-tune at the original length) runs and lowers the loss on its data."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from posenc.errors import UserError  # noqa: E402
from posenc.hf import current_extension, extend, hf_rope_parameters, recalibrate, restore  # noqa: E402
from posenc.hf.recalibration import recalibration_config  # noqa: E402
from tests.hf.helpers import ORIG, VOCAB, peaked_model, tiny_config  # noqa: E402


def _logits(model, ids, positions=None):
    with torch.no_grad():
        return model(input_ids=ids, position_ids=positions, use_cache=False).logits


@pytest.fixture
def model():
    return peaked_model(tiny_config("llama"))


@pytest.fixture
def ids():
    return torch.randint(0, VOCAB, (1, 24), generator=torch.Generator().manual_seed(3))


def test_the_rotary_is_gone_from_every_layer(model, ids):
    """Equal to the same model whose rotary turns by angle 0 (inv_freq zeroed), and not to
    the model as it was."""
    import copy
    reference = copy.deepcopy(model)
    reference.model.rotary_emb.inv_freq.zero_()
    before = _logits(model, ids)
    ext = extend(model, "drope")
    assert ext.method == "drope" and ext.attention["steps"] == 200
    torch.testing.assert_close(_logits(model, ids), _logits(reference, ids), rtol=0, atol=0)
    assert not torch.allclose(_logits(model, ids), before, atol=1e-3)
    restore(model)
    assert current_extension(model) is None
    torch.testing.assert_close(_logits(model, ids), before, rtol=0, atol=0)


def test_attention_stays_causal(model, ids):
    extend(model, "drope")
    changed = ids.clone()
    changed[0, 16:] = (changed[0, 16:] + 1) % VOCAB
    a, b = _logits(model, ids), _logits(model, changed)
    torch.testing.assert_close(a[:, :16], b[:, :16])
    assert not torch.allclose(a[:, 16:], b[:, 16:])


def test_recalibration_at_the_original_length_lowers_the_loss(model):
    stream = torch.arange(600) % 7 + 3          # a stream the model can learn quickly
    extend(model, "drope", steps=30, lr=3e-3)
    assert recalibration_config(model).length == ORIG
    windows = stream[:ORIG * 4].view(4, ORIG)

    def loss():
        with torch.no_grad():
            return float(model(input_ids=windows, labels=windows, use_cache=False).loss)

    before = loss()
    losses = recalibrate(model, stream)
    assert len(losses) == 30 and not model.training
    assert loss() < 0.5 * before


def test_refusals(model):
    with pytest.raises(UserError, match="goes alone"):
        extend(model, "drope+logn")
    with pytest.raises(UserError, match="takes no factor"):
        extend(model, "drope:2")
    with pytest.raises(UserError, match="extend it first"):
        recalibrate(model, torch.arange(100))
    ext = extend(model, "drope")
    with pytest.raises(UserError, match="without rotary embeddings"):
        hf_rope_parameters(ext)


def test_the_arena_recalibrates_drope_once_and_gives_the_weights_back(tmp_path, monkeypatch):
    """The gpu preset names drope; a run recalibrates it once (its declared budget, here
    shortened), measures it, notes the budget, and leaves the model's own weights."""
    import json

    from posenc.hf import recalibration
    from posenc.hf.arena import ArenaStudy
    from posenc.hf.arena_request import preset_request
    from posenc.methods import drope
    from posenc.study import run_study
    from tests.hf.helpers import save_tiny_model

    assert "drope" in preset_request("gpu").methods
    monkeypatch.setattr(drope, "RECALIBRATION_STEPS", 2)
    calls, real = [], recalibration.recalibrate
    monkeypatch.setattr(recalibration, "recalibrate",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    tiny = save_tiny_model(tmp_path / "llama")
    request = preset_request("cpu", model=str(tiny), text=str(tiny.parent / "data.txt"),
                             methods=("none", "drope"), factor=2.0, original=256,
                             depths=(0.0, 1.0), needles=1, passkey_trials=0, eval_windows=1,
                             tasks=())                   # RULER's prompts need more tokens
    study = ArenaStudy(request)
    run_study(study, tmp_path / "arena")
    results = json.loads((tmp_path / "arena" / "results.json").read_text())
    assert results["methods"] == ["none", "drope"] and len(calls) == 1
    assert results["extensions"]["drope"]["attention"]["steps"] == 2
    assert any("drope is recalibrated" in note for note in results["notes"])
    fresh = ArenaStudy(request)
    fresh.prepare(None)
    for key, value in fresh.model.state_dict().items():
        torch.testing.assert_close(study.model.state_dict()[key], value, rtol=0, atol=0)
