"""TrainConfig: round trips, differences and validation; the parsing of key=value
options."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from posenc.train import TrainConfig
from posenc.train.config import parse_options, parse_value
from tests.train.helpers import tiny


def test_config_round_trip_and_validation(tmp_path):
    cfg = tiny(tmp_path, model={"pe": "alibi", "pe_options": {"logn_base_len": 16}})
    back = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.differences(cfg) == []
    assert cfg.differences(tiny(tmp_path, lr=0.1, model={"pe": "t5"})) == ["lr", "model.pe",
                                                                          "model.pe_options"]
    assert cfg.warmup == 0 and tiny(tmp_path, steps=50).warmup == 5
    packed = replace(cfg, pack=True)
    assert packed.to_dict()["pack"] is True and not cfg.pack
    assert TrainConfig.from_dict(json.loads(json.dumps(packed.to_dict()))) == packed
    assert packed.differences(cfg) == ["pack"]
    before = {k: v for k, v in cfg.to_dict().items() if k != "pack"}   # a run from before
    assert TrainConfig.from_dict(before) == cfg                        # packing: unpacked
    cases = [({"train_len": 32}, "max_len=16 is smaller than train_len=32"),
             ({"task": "copy"}, "either task or data"),
             ({"data": None, "task": "copy", "tokenizer": "bpe:500"}, "must be 'byte'"),
             ({"task": "sort", "data": None}, "valid tasks"),
             ({"tokenizer": "chars"}, "valid: byte, bpe:N"),
             ({"lr": 0}, "lr must be"), ({"warmup_steps": 6}, "warmup_steps must be < steps"),
             ({"device": "tpu"}, "device must be auto or a device string"),
             ({"data": None, "task": "copy", "pack": True}, "single documents already"),
             ({"pack": 1}, "pack must be a bool")]
    for change, msg in cases:
        with pytest.raises(ValueError, match=msg):
            tiny(tmp_path, **change)
    with pytest.raises(ValueError, match="unknown TrainConfig key"):
        TrainConfig.from_dict({"steps": 3, "epochs": 2})
    assert parse_options(["theta=500000", "layout=half", "x=1.5", "y=true"]) == {
        "theta": 500000, "layout": "half", "x": 1.5, "y": True}
    assert parse_value("null") is None
    with pytest.raises(ValueError, match="key=value"):
        parse_options(["theta"])


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1", "mps", "xpu:0"])
def test_any_device_string_torch_parses_is_a_setting(device):
    assert TrainConfig(device=device).device == device


@pytest.mark.parametrize("device", ["meta", "bogus", "", 3])
def test_a_string_that_is_no_device_is_refused_in_one_line(device):
    with pytest.raises(ValueError, match="device must be auto or a device string"):
        TrainConfig(device=device)


@pytest.mark.parametrize("config,option", [
    ("train", "seed"), ("task", "seed"), ("extend", "seed"), ("compare", "the last seed")])
def test_every_config_takes_the_one_seed_range(config, option):
    """Seeds up to 2**64 - 1 (torch's range) pass and one past it is refused naming the
    option, in every config that holds a seed."""
    from posenc.encodings.checks import MAX_SEED
    from posenc.errors import UserError
    from posenc.hf.extension_settings import ExtensionSettings as StudyConfig
    from posenc.lab.compare.presets import BASE_TRAIN, CompareConfig
    from posenc.train.task_loop import TaskTrainConfig

    def make(seed: int):
        if config == "train":
            return TrainConfig(seed=seed)
        if config == "task":
            return TaskTrainConfig(seed=seed)
        if config == "extend":
            return StudyConfig(lengths=(64,), seed=seed)
        return CompareConfig(train=replace(BASE_TRAIN, seed=seed - 1), seeds=2)

    make(MAX_SEED)
    with pytest.raises(UserError, match=rf"^{option}.* must be between 0 and 2\*\*64 - 1"):
        make(MAX_SEED + 1)
