"""GGUF export: llama.cpp's rope-scaling keys read back with the gguf package, weights that
transformers' GGUF loader turns back into the same model, a source file's tensors copied
unchanged, and the methods GGUF cannot carry refused with the reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.hf.helpers import ORIG
from tests.hf.helpers import logits_of as _logits
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from posenc.hf import extend, restore  # noqa: E402
from posenc.hf.gguf_export import check_gguf_method, write_gguf  # noqa: E402


def _fields(path):
    reader = gguf.GGUFReader(str(path))
    return {name: f.contents() for name, f in reader.fields.items()}, reader


@pytest.mark.parametrize("method,options,expected", [
    ("none", {}, {"context_length": ORIG}),
    ("linear", {}, {"context_length": 2 * ORIG, "rope.scaling.type": "linear",
                    "rope.scaling.factor": 2.0,
                    "rope.scaling.original_context_length": ORIG}),
    ("ntk", {}, {"context_length": 2 * ORIG, "rope.freq_base": 10000.0 * 2 ** (16 / 14)}),
    ("yarn", {"beta_fast": 32.0}, {"context_length": 2 * ORIG, "rope.scaling.type": "yarn",
                                   "rope.scaling.factor": 2.0,
                                   "rope.scaling.original_context_length": ORIG}),
    # llama.cpp multiplies by 1 + 0.1 ln s itself, then by the key
    ("yarn", {"attention_factor": 1.5}, {"rope.scaling.attn_factor":
                                         1.5 / (1 + 0.1 * math.log(2))}),
    ("llama3", {}, {"context_length": 2 * ORIG}),
    ("longrope", {"long_factor": [1.0 + i for i in range(8)], "short_factor": [1.0] * 8},
     {"context_length": 2 * ORIG, "rope.scaling.type": "longrope",
      "rope.scaling.original_context_length": ORIG,
      "rope.scaling.attn_factor": math.sqrt(1 + math.log(2) / math.log(ORIG))}),
])
def test_rope_scaling_metadata_reads_back(method, options, expected, tmp_path):
    model = _model(_config())
    extend(model, method, None if method == "none" else 2.0, **options)
    fields, reader = _fields(write_gguf(model, tmp_path / "m.gguf"))
    for key, value in expected.items():
        got = fields[f"llama.{key}"]
        assert got == (pytest.approx(value, rel=1e-6) if isinstance(value, float) else value)
    if method not in ("linear", "yarn", "longrope"):
        assert not any(".rope.scaling." in k for k in fields)
    assert not any("yarn_" in k for k in fields)       # keys llama.cpp's Llama loader ignores
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    if method == "llama3":     # wavelengths: high frequencies kept, low ones x factor
        freqs = tensors["rope_freqs.weight"]
        assert freqs.shape == (8,) and freqs[0] == pytest.approx(1.0) \
            and freqs[-1] == pytest.approx(2.0)
    if method == "longrope":
        np.testing.assert_allclose(tensors["rope_factors_long.weight"], options["long_factor"])


def test_qwen3_names_and_head_size(tmp_path):
    """transformers' GGUF loader gives Qwen3 its default head_dim (128, it reads no
    key_length), so the tiny model is checked by its keys and tensor names instead."""
    model = _model(_config("qwen3"))
    fields, reader = _fields(write_gguf(model, tmp_path / "m.gguf"))
    assert fields["qwen3.attention.key_length"] == 16 and fields["general.architecture"] \
        == "qwen3"
    names = {t.name for t in reader.tensors}
    assert {"blk.0.attn_q_norm.weight", "blk.1.attn_k_norm.weight", "output.weight",
            "token_embd.weight"} <= names
    assert len(names) == len(model.state_dict())


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_weights_load_back_in_transformers(kind, ids, tmp_path):
    """transformers' GGUF loader (which ignores rope scaling) rebuilds the same model."""
    model = _model(_config(kind))
    expected = _logits(model, ids)
    extend(model, "linear", 2.0)
    write_gguf(model, tmp_path / "m.gguf")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file="m.gguf", dtype=torch.float32).eval()
    torch.testing.assert_close(_logits(loaded, ids), expected, atol=1e-5, rtol=1e-5)
    restore(model)


def test_source_tensors_are_copied_and_metadata_rewritten(tmp_path):
    model = _model(_config())
    write_gguf(model, tmp_path / "source.gguf")
    extend(model, "yarn", 4.0)
    write_gguf(model, tmp_path / "out.gguf", source=tmp_path / "source.gguf")
    src, src_reader = _fields(tmp_path / "source.gguf")
    out, out_reader = _fields(tmp_path / "out.gguf")
    assert out["llama.rope.scaling.type"] == "yarn" and out["llama.context_length"] == 4 * ORIG
    assert out["llama.block_count"] == src["llama.block_count"] == 2
    for a, b in zip(src_reader.tensors, out_reader.tensors):
        assert a.name == b.name and bytes(a.data) == bytes(b.data)
    with pytest.raises(FileExistsError, match="exists"):
        write_gguf(model, tmp_path / "out.gguf")


@pytest.mark.parametrize("method,reason", [
    ("dynamic", "no dynamic NTK"), ("yarn+logn", "no log-n"),
    ("rerope", "per region"), ("streaming", "per region"),
])
def test_methods_gguf_cannot_carry_are_refused(method, reason):
    with pytest.raises(ValueError, match=f"cannot be written to GGUF: .*{reason}"):
        check_gguf_method(method)


@pytest.mark.parametrize("options", [{"beta_fast": 16.0}, {"beta_slow": 2.0}])
def test_yarn_betas_llama_cpp_would_ignore_are_refused(options, tmp_path):
    model = _model(_config())
    extend(model, "yarn", 2.0, **options)
    with pytest.raises(ValueError, match=r"yarn beta_(fast|slow)=\S+ cannot be written to "
                                         "GGUF: llama.cpp's loaders .* read no beta key"):
        write_gguf(model, tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


def test_self_extend_writes_the_plain_model_and_records_the_flags(tmp_path):
    from posenc.hf.gguf_export import recorded_flags
    model = _model(_config())
    write_gguf(model, tmp_path / "plain.gguf")
    extend(model, "self_extend", 4.0)                        # defaults: W = G = 5 for 32 x 4
    fields, reader = _fields(write_gguf(model, tmp_path / "se.gguf"))
    plain, plain_reader = _fields(tmp_path / "plain.gguf")
    assert recorded_flags(tmp_path / "se.gguf") == "--grp-attn-n 5 --grp-attn-w 5"
    assert recorded_flags(tmp_path / "plain.gguf") is None
    own = {"posenc.llama_cpp_flags", "GGUF.kv_count"}
    assert {k: v for k, v in fields.items() if k not in own} == \
        {k: v for k, v in plain.items() if k not in own}
    for a, b in zip(plain_reader.tensors, reader.tensors, strict=True):
        assert a.name == b.name and bytes(a.data) == bytes(b.data)
    restore(model)
    extend(model, "self_extend", 4.0, window=8, group=3)
    with pytest.raises(ValueError, match=r"window to be a multiple of the group .* window 8 "
                                         "and group 3; choose e.g. window 6"):
        write_gguf(model, tmp_path / "bad.gguf")


def test_unsupported_architecture_without_source(tmp_path):
    model = _model(_config("phi3"))
    with pytest.raises(ValueError, match="writing phi3 weights to GGUF is not supported"):
        write_gguf(model, tmp_path / "m.gguf")


def test_quantized_source_tensors_are_copied_as_they_are(tmp_path):
    """A Q8_0 tensor (as in the SmolLM2 file) is copied byte for byte with its shape."""
    from gguf.quants import quantize
    writer = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "llama")
    writer.add_context_length(ORIG)
    weights = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    writer.add_tensor("blk.0.attn_q.weight", quantize(weights, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = _model(_config())
    extend(model, "linear", 2.0)
    write_gguf(model, tmp_path / "out.gguf", source=tmp_path / "q.gguf")
    src, out = gguf.GGUFReader(str(tmp_path / "q.gguf")), gguf.GGUFReader(str(tmp_path /
                                                                              "out.gguf"))
    for a, b in zip(src.tensors, out.tensors, strict=True):
        assert (a.name, a.tensor_type, list(a.shape)) == (b.name, b.tensor_type, list(b.shape))
        assert bytes(a.data) == bytes(b.data)
    assert out.fields["llama.rope.scaling.type"].contents() == "linear"


def test_written_aside_as_a_run_folder_temporary(tmp_path, monkeypatch):
    """The file is written to a posenc.runio temporary (a run folder's lock removes those a
    crash leaves) and an interrupted write leaves nothing."""
    from posenc import runio
    from posenc.hf import gguf_export
    names = []

    def interrupted(writer, *args):
        names.append(writer.path.name)
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_export, "_write_weights", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_gguf(_model(_config()), tmp_path / "m.gguf")
    assert len(names) == 1 and runio.is_temporary(names[0])
    assert names[0].startswith(".posenc-tmp-m.gguf.")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("method", ["none", "linear", "yarn", "ntk"])
def test_a_lower_original_length_never_shrinks_the_exported_context(method, tmp_path):
    """``original`` set below the model's context (a test setting): the saved config and the
    GGUF file keep the model's own context when it is the larger."""
    from posenc.hf import save_extended
    model = _model(_config())                       # max_position_embeddings = ORIG
    native = model.config.max_position_embeddings
    extend(model, method, None if method == "none" else 2.0,
           original_max_position_embeddings=native // 4)           # target: native / 2
    fields, _ = _fields(write_gguf(model, tmp_path / "m.gguf"))
    assert fields["llama.context_length"] == native
    saved = save_extended(model, tmp_path / "saved")
    config = transformers.AutoConfig.from_pretrained(saved)
    assert config.max_position_embeddings == native


def test_dynamic_below_the_native_context_cannot_be_saved(tmp_path):
    from posenc.errors import UserError
    from posenc.hf import save_extended
    model = _model(_config())
    extend(model, "dynamic", 2.0, original_max_position_embeddings=ORIG // 2)
    with pytest.raises(UserError, match="reads the original length from "
                                        "max_position_embeddings"):
        save_extended(model, tmp_path / "saved")
