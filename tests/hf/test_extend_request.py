"""What ``posenc extend`` is asked (the request, compared on resume): the keys results.json
has always had, options that do nothing stored as null, fine-tune options checked."""

from __future__ import annotations

import pytest

from posenc.errors import UserError
from posenc.hf.arena_request import ArenaRequest
from posenc.hf.extend_request import ExtendRequest


def test_eval_windows_keep_the_keys_results_have_always_had():
    """The request's and the config's ``eval_windows`` are stored as ``windows`` and
    ``max_windows``, so a results.json written before reads and resumes the same."""
    from posenc.hf.extension_settings import ExtensionSettings as StudyConfig
    from posenc.hf.extension_settings import config_dict
    setting = ExtendRequest(model="m", eval_windows=3).setting()
    assert setting["windows"] == 3 and "eval_windows" not in setting
    assert list(setting).index("windows") == list(setting).index("stride") + 1
    config = config_dict(StudyConfig(lengths=(64,), eval_windows=3))
    assert config["max_windows"] == 3 and "eval_windows" not in config
    arena = ArenaRequest(eval_windows=0).setting()
    assert arena["windows"] == 0 and "eval_windows" not in arena


def test_options_that_do_nothing_are_stored_as_null():
    """Without ``passkey`` the passkey's options, without fine-tune steps the fine-tune's,
    are null in the setting, so changing them does not make a study incomparable."""
    plain = ExtendRequest(model="m").setting()
    assert plain["passkey_lengths"] is plain["passkey_depths"] is plain["passkey_trials"] is None
    assert plain["finetune_len"] is plain["finetune_lr"] is None
    assert ExtendRequest(model="m", passkey_trials=7).setting() == plain
    asked = ExtendRequest(model="m", passkey=True, passkey_trials=7, finetune_steps=3,
                          finetune_len=64).setting()
    assert asked["passkey_trials"] == 7 and asked["finetune_len"] == 64


def test_the_config_takes_the_longest_length_to_fine_tune_and_refuses_a_length_alone():
    config = ExtendRequest(model="m", finetune_steps=3).config((128, 256))
    assert config.finetune.steps == 3 and config.finetune.length == 256
    assert config.passkey_lengths == ()
    with pytest.raises(UserError, match="finetune length needs finetune steps"):
        ExtendRequest(model="m", finetune_len=64).config((128,))
