"""Training with a scaffold (DroPE: Gelberg et al. 2026): the first ``scaffold_steps`` steps
run with RoPE in place of the model's own encoding (NoPE), the rest without it; the saved run
is the NoPE model, and a run stopped before or after the drop resumes to the weights of an
uninterrupted one."""

from __future__ import annotations

import pytest
import torch

from posenc.errors import UserError
from posenc.train import load_run, train
from tests.train.helpers import tiny


class Killed(Exception):
    pass


def _cfg(tmp_path, **kw):
    return tiny(tmp_path, model={"pe": "nope"}, steps=6, checkpoint_every=1,
                scaffold_pe="rope", scaffold_steps=3, **kw)


def _weights(run_dir):
    return load_run(run_dir).model.state_dict()


def test_rope_trains_the_first_steps_then_the_model_goes_on_without_it(tmp_path):
    seen = []
    train(_cfg(tmp_path), tmp_path / "run", progress=False,
          on_step=lambda step, record, model: seen.append(model.pe.name))
    assert seen == ["rope"] * 3 + ["nope"] * 3
    loaded = load_run(tmp_path / "run")
    assert loaded.model.pe.name == "nope" and loaded.train_config.scaffold_steps == 3
    # the rope steps mattered: a NoPE run from the same seed ends elsewhere
    plain = tiny(tmp_path, model={"pe": "nope"}, steps=6, checkpoint_every=1)
    train(plain, tmp_path / "plain", progress=False)
    assert any(not torch.equal(a, b) for a, b in zip(_weights(tmp_path / "run").values(),
                                                     _weights(tmp_path / "plain").values()))


@pytest.mark.parametrize("stop_at", [2, 4])
def test_a_stopped_run_resumes_like_an_uninterrupted_one(tmp_path, stop_at):
    cfg = _cfg(tmp_path)
    train(cfg, tmp_path / "straight", progress=False)

    def stop(step, record, model):
        if step == stop_at:
            raise Killed

    with pytest.raises(Killed):
        train(cfg, tmp_path / "run", progress=False, on_step=stop)
    train(cfg, tmp_path / "run", progress=False)
    for name, value in _weights(tmp_path / "straight").items():
        torch.testing.assert_close(_weights(tmp_path / "run")[name], value, rtol=0, atol=0)


def test_the_config_saves_it_only_when_set(tmp_path):
    from posenc.train import TrainConfig
    cfg = _cfg(tmp_path)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert "scaffold_pe" not in tiny(tmp_path).to_dict()


@pytest.mark.parametrize("kw,message", [
    ({"scaffold_pe": "alibi"}, "scaffold_pe must be one of rope"),
    ({"scaffold_steps": 6}, "scaffold_steps must be < steps"),
    ({"model": {"pe": "alibi"}}, "not one")])
def test_refusals(tmp_path, kw, message):
    base = {"model": {"pe": "nope"}, "scaffold_pe": "rope", "scaffold_steps": 3}
    with pytest.raises(UserError, match=message):
        tiny(tmp_path, **{**base, **kw})
