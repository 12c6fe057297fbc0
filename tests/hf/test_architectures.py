"""Per-family facts extend relies on (tiny configs): which layers are extended, where the
rope parameters live, what a saved config keeps, and the refusal of unknown model types."""

from __future__ import annotations

import pytest

from tests.hf.helpers import VOCAB
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.hf import extend  # noqa: E402
from posenc.hf.architectures import (  # noqa: E402
    LOCAL,
    NOPE,
    ROPE,
    extended_rope,
    layer_kinds,
    local_theta,
    with_extended_rope,
)


def test_layer_kinds_and_rope_parameters():
    assert layer_kinds(_config("llama", layers=3)) == [ROPE] * 3
    assert layer_kinds(_config("smollm3", layers=4)) == [ROPE, NOPE, ROPE, NOPE]
    gemma = _config("gemma3_text", layers=2)
    assert layer_kinds(gemma) == [LOCAL, ROPE]
    assert extended_rope(gemma)["rope_theta"] == 1e6 and local_theta(gemma) == 10000.0
    nested = with_extended_rope(gemma, {"rope_type": "linear", "factor": 2.0})
    assert nested["full_attention"]["rope_type"] == "linear"
    assert nested["sliding_attention"] == gemma.rope_parameters["sliding_attention"]
    phi = _config("phi3")
    assert with_extended_rope(phi, {"rope_type": "longrope"})["partial_rotary_factor"] == 1.0


def test_unsupported_model_type_names_the_supported_ones():
    config = transformers.GPTNeoXConfig(hidden_size=32, num_attention_heads=2,
                                        num_hidden_layers=1, intermediate_size=32,
                                        vocab_size=VOCAB)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match=r"'gpt_neox' is not supported; supported model "
                                         r"types: llama, mistral, qwen2, qwen3, gemma3_text, "
                                         r"smollm3, phi3, deepseek_v3$"):
        extend(model, "yarn", 2.0)
