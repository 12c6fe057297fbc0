"""llama.cpp reads posenc's GGUF files as posenc means them: a tiny Llama extended by each
method GGUF can carry (none, linear, NTK, YaRN with default and given attention factor, Llama 3)
is written in f32, loaded by llama.cpp (llama-cpp-python), and its logits at every position up
to 2.5x the original context equal posenc's extended model's.

Tolerance: 2e-4 absolute + 1e-4 relative on logits of magnitude up to about 11 (both sides
compute in fp32; llama.cpp sums in another order and rounds the rotation's frequencies to
fp32; the largest difference seen was 4.3e-5, llama-cpp-python 0.3.36 on a CPU). Each method
moves the logits past the original context by more than 8, and the controls (a total YaRN
attention factor under llama.cpp's key, a beta key llama.cpp's Llama loader ignores) leave
tolerance by far.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.hf.helpers import ORIG, T
from tests.hf.helpers import logits_of as _logits
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("llama_cpp")

from posenc.hf import extend, restore  # noqa: E402
from posenc.hf.gguf_export import write_gguf  # noqa: E402
from tests.hf.llama_cpp_runner import LlamaCpp  # noqa: E402

ATOL, RTOL = 2e-4, 1e-4
FACTOR = T / ORIG                                  # 2.5: the test length is the target

#: (method, options): every setting a GGUF file can carry for a Llama
CASES = [("none", {}), ("linear", {}), ("ntk", {}), ("yarn", {}),
         ("yarn", {"attention_factor": 1.3}), ("yarn", {"beta_fast": 32.0, "beta_slow": 1.0,
                                                        "attention_factor": 0.9}),
         ("llama3", {}), ("llama3", {"low_freq_factor": 2.0, "high_freq_factor": 8.0})]


@pytest.fixture(scope="module")
def model():
    return _model(_config())


@pytest.fixture(scope="module")
def plain(model, ids):
    return _logits(model, ids)[0].numpy()


def _llama_cpp_logits(path, ids):
    llm = LlamaCpp(path, n_ctx=T)
    try:
        return llm.logits(ids[0].tolist())
    finally:
        llm.close()


@pytest.mark.parametrize("method,options", CASES, ids=[f"{m}-{i}" for i, (m, _) in
                                                         enumerate(CASES)])
def test_llama_cpp_logits_equal_posencs_past_the_original_context(method, options, model,
                                                                   plain, ids, tmp_path):
    extend(model, method, None if method == "none" else FACTOR, **options)
    try:
        expected = _logits(model, ids)[0].numpy()
        path = write_gguf(model, tmp_path / "m.gguf")
    finally:
        restore(model)
    got = _llama_cpp_logits(path, ids)
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=RTOL)
    if method != "none":                              # the method shows past the original
        assert np.abs(expected[ORIG:] - plain[ORIG:]).max() > 100 * ATOL


def test_a_source_files_tensors_with_rewritten_metadata(model, ids, tmp_path):
    """The path for a GGUF model (SmolLM2's): tensors copied, rope metadata rewritten."""
    write_gguf(model, tmp_path / "source.gguf")
    extend(model, "yarn", FACTOR, attention_factor=1.2)
    try:
        expected = _logits(model, ids)[0].numpy()
        path = write_gguf(model, tmp_path / "m.gguf", source=tmp_path / "source.gguf")
    finally:
        restore(model)
    np.testing.assert_allclose(_llama_cpp_logits(path, ids), expected, atol=ATOL, rtol=RTOL)


def test_the_total_attention_factor_under_llama_cpps_yarn_key_would_be_misread(model, ids,
                                                                                tmp_path):
    """The control: transformers' total factor written as is to ``rope.scaling.attn_factor``
    is applied twice over by llama.cpp (x (1 + 0.1 ln s)), and its logits leave tolerance."""
    import gguf
    extend(model, "yarn", FACTOR, attention_factor=1.3)
    try:
        expected = _logits(model, ids)[0].numpy()
        path = write_gguf(model, tmp_path / "m.gguf")
    finally:
        restore(model)
    reader = gguf.GGUFReader(str(path), "r+")          # rewrite the key's value in place
    field = reader.fields["llama.rope.scaling.attn_factor"]
    field.parts[field.data[0]][0] = 1.3
    assert field.contents() == pytest.approx(1.3)
    del reader
    got = _llama_cpp_logits(path, ids)
    assert np.abs(got - expected).max() > 100 * ATOL


def test_llama_cpp_ignores_a_yarn_beta_key_so_posenc_refuses_to_write_one(model, ids, tmp_path,
                                                                         monkeypatch):
    """Why non-default betas are refused: a file that carries ``yarn_beta_slow`` = 0.25 gives
    llama.cpp's default-beta logits, not those of posenc's model with beta_slow = 0.25 (on
    this short original context beta_slow moves the ramp; beta_fast from 1 to 32 does not)."""
    from posenc.hf import gguf_export
    extend(model, "yarn", FACTOR)
    try:
        default_betas = _logits(model, ids)[0].numpy()
        written = gguf_export.rope_metadata

        def with_beta(ext, arch):
            return {**written(ext, arch), f"{arch}.rope.scaling.yarn_beta_slow": 0.25}
        monkeypatch.setattr(gguf_export, "rope_metadata", with_beta)
        path = write_gguf(model, tmp_path / "m.gguf")
    finally:
        restore(model)
    extend(model, "yarn", FACTOR, beta_slow=0.25)
    try:
        other_beta = _logits(model, ids)[0].numpy()
    finally:
        restore(model)
    got = _llama_cpp_logits(path, ids)
    np.testing.assert_allclose(got, default_betas, atol=ATOL, rtol=RTOL)
    assert np.abs(got - other_beta).max() > 100 * ATOL
