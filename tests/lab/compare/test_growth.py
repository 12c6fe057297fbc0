"""Growing a comparison: older flat configs migrate to the nested form, and only the
settings that change results make runs incomparable."""

from dataclasses import replace

from posenc.lab.compare.base_train import migrate_config
from posenc.lab.compare.growth import incomparable_reason
from posenc.lab.compare.presets import PRESETS, CompareConfig

#: the config block of a results.json written before training and model settings were
#: nested (``posenc compare --preset smoke``)
FLAT_SMOKE = {
    "preset": "smoke", "encodings": ["rope", "alibi"], "train_len": 16, "steps": 20,
    "batch_size": 8, "lr": 0.003, "warmup_steps": None, "weight_decay": 0.1, "grad_clip": 1.0,
    "seed": 0, "seeds": 1, "bf16": False, "d_model": 32, "n_layers": 1, "n_heads": 2,
    "data": None, "tokenizer": "byte", "lengths": [16, 32, 64, 128, 256],
    "length_multipliers": [1, 2, 4, 8, 16], "eval_tokens": 512, "stride": None,
    "scalings": ["linear:4", "ntk:4", "dynamic", "yarn:4", "logn"], "entropy_max_len": 64,
    "entropy_windows": 1, "timing_rounds": 5, "pe_options": {}}


def test_a_flat_config_of_older_results_migrates_to_the_nested_form():
    nested = migrate_config(FLAT_SMOKE)
    then = replace(PRESETS["smoke"], scalings=tuple(FLAT_SMOKE["scalings"]))  # fewer then
    assert nested == then.to_dict()
    assert migrate_config(nested) is nested
    assert incomparable_reason(FLAT_SMOKE, PRESETS["smoke"]) is None
    assert "train.steps is 20 there but 21 now" == incomparable_reason(
        FLAT_SMOKE, PRESETS["smoke"].with_options(steps=21))
    cfg = CompareConfig.from_dict(FLAT_SMOKE)
    assert cfg.train == PRESETS["smoke"].train and cfg.model.d_model == 32


def test_the_device_does_not_make_runs_incomparable():
    old = PRESETS["smoke"].with_options(device="cpu").to_dict()
    assert incomparable_reason(old, PRESETS["smoke"].with_options(device="cuda")) is None
    assert "train.bf16" in incomparable_reason(old, PRESETS["smoke"].with_options(bf16=True))
