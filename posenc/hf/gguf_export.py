"""Write an extended model as a GGUF file that llama.cpp reads, with its rope-scaling metadata.

llama.cpp keys (``gguf.constants.Keys.Rope``, ``{arch}`` the GGUF architecture), checked
against llama.cpp's own logits by ``tests/hf/test_llama_cpp_*.py``:

========  =========================================================================
method    what is written
========  =========================================================================
none      ``{arch}.context_length`` = the original context, no scaling keys
linear    ``rope.scaling.type`` linear, ``.factor``, ``.original_context_length``
ntk       ``rope.freq_base`` raised to theta * s^(d / (d - 2)) (plain RoPE for llama.cpp)
yarn      ``rope.scaling.type`` yarn, ``.factor``, ``.original_context_length``, and for
          a given attention factor a ``.attn_factor`` = attention_factor / (1 + 0.1 ln s):
          llama.cpp multiplies its rotation by (1 + 0.1 ln s) itself (``ggml_rope_yarn``)
          and by ``.attn_factor`` (``llama_context``). Beta_fast and beta_slow other than
          32 and 1 are refused: llama.cpp's Llama and Qwen loaders read no
          ``.yarn_beta_*`` key, so a file could not carry them (``--yarn-beta-fast`` /
          ``--yarn-beta-slow`` set them at run time)
llama3    the tensor ``rope_freqs.weight`` (original / scaled inverse frequency per pair),
          as llama.cpp's converter writes Llama 3.1 (no scaling type)
longrope  ``rope.scaling.type`` longrope, ``.original_context_length``, ``.attn_factor``
          and the tensors ``rope_factors_long.weight`` / ``rope_factors_short.weight``
========  =========================================================================

with ``{arch}.context_length`` = original x factor, or the model's own context if larger (a
lower original length set for a test never shrinks the exported model; for none, the larger
of the two lengths). Methods llama.cpp cannot read from a file are refused with the reason
(dynamic NTK, log-n, the exact cache, the region methods), except those llama.cpp runs from
its command line (``llama_cpp_run_time``: Self-Extend, ``--grp-attn-n G --grp-attn-w W``):
for those the file holds the plain model, as for none, and the flags under the key
``posenc.llama_cpp_flags`` (:func:`llama_cpp_flags`, :func:`recorded_flags`).

:func:`write_gguf` copies the tensors of a source GGUF file unchanged (quantized, as they are)
and rewrites its metadata, or writes the model's own weights in fp32 (Llama, Mistral, Qwen2,
Qwen3 layouts: q/k rows permuted for llama as llama.cpp's converter does). A file written from
weights carries no vocabulary: its ``tokenizer.ggml.model`` is llama.cpp's ``none`` (token ids
in, logits out; llama.cpp refuses a file without the key), so tokenize elsewhere or give the
source GGUF file to keep its tokenizer; transformers loads it too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import UserError
from ..methods import parse_method_spec
from ..runio import atomic_write_path
from .extend import Extension, current_extension

#: Hugging Face model type -> GGUF architecture, for writing weights
GGUF_ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
_YARN_KEYS = ("beta_fast", "beta_slow", "attention_factor")
#: the betas llama.cpp uses when a file names none (``llama_hparams``), as transformers does
_YARN_BETAS = {"beta_fast": 32.0, "beta_slow": 1.0}
#: where a GGUF file records the command-line flags of a run-time method
FLAGS_KEY = "posenc.llama_cpp_flags"


def check_gguf_method(method: str) -> None:
    """UserError unless a GGUF file can carry ``method`` (a name like "yarn" or "ntk+logn")."""
    spec = parse_method_spec(method)
    if spec.logn or spec.exact:
        raise UserError(f"method {method!r} cannot be written to GGUF: llama.cpp has no "
                         "log-n scaling or exact cache; write the method without the add-on")
    why = spec.method.gguf_refusal
    if why is not None and not spec.method.llama_cpp_run_time:
        raise UserError(f"method {method!r} cannot be written to GGUF: {why}")


def llama_cpp_flags(ext: Extension) -> tuple[str, ...]:
    """The llama.cpp command-line flags that run ``ext``'s method on the plain model (empty
    for a method the file's metadata carries), or a UserError."""
    check_gguf_method(ext.name)
    if ext.attention is None:
        return ()
    from ..methods import build_method
    options = {k: v for k, v in ext.attention.items() if k != "name"}
    method = build_method(ext.method, ext.original_max_position_embeddings, ext.factor,
                          **options)
    return method.llama_cpp_flags()


def recorded_flags(path: str | os.PathLike) -> str | None:
    """The llama.cpp flags a file written by :func:`write_gguf` records, or None."""
    import gguf
    field = gguf.GGUFReader(str(path)).fields.get(FLAGS_KEY)
    return None if field is None else str(field.contents())


def rope_metadata(ext: Extension, arch: str) -> dict[str, Any]:
    """GGUF keys -> values for ``ext`` (strings for the scaling type, floats, ints)."""
    check_gguf_method(ext.name)
    key = f"{arch}.rope"
    meta: dict[str, Any] = {f"{arch}.context_length": ext.context_length,
                            f"{key}.freq_base": ext.theta}
    scaling = ext.scaling or {}
    if ext.method == "none" or ext.attention is not None:     # the plain model
        meta[f"{arch}.context_length"] = max(ext.original_max_position_embeddings,
                                             ext.native_max_position_embeddings or 0)
        flags = llama_cpp_flags(ext)
        if flags:
            meta[FLAGS_KEY] = " ".join(flags)
    elif ext.method == "ntk":
        d = ext.head_dim
        meta[f"{key}.freq_base"] = ext.theta * ext.factor ** (d / (d - 2))
    elif ext.method in ("linear", "yarn", "longrope"):
        meta[f"{key}.scaling.type"] = ext.method
        meta[f"{key}.scaling.original_context_length"] = ext.original_max_position_embeddings
        if ext.method != "longrope":
            meta[f"{key}.scaling.factor"] = ext.factor
    if ext.method == "yarn":
        unknown = sorted(set(scaling) & {"mscale", "mscale_all_dim", "truncate"})
        if unknown:
            raise UserError(f"yarn option(s) {', '.join(unknown)} have no llama.cpp key "
                            f"posenc writes; GGUF export takes {', '.join(_YARN_KEYS)}")
        betas = {k: float(scaling[k]) for k in _YARN_BETAS
                 if scaling.get(k) is not None and float(scaling[k]) != _YARN_BETAS[k]}
        if betas:
            given = ", ".join(f"{k}={v:g}" for k, v in betas.items())
            raise UserError(f"yarn {given} cannot be written to GGUF: llama.cpp's loaders for "
                            "these models read no beta key (they use 32 and 1); pass "
                            "--yarn-beta-fast/--yarn-beta-slow to llama.cpp instead")
        if scaling.get("attention_factor") is not None:       # llama.cpp adds 1 + 0.1 ln s
            meta[f"{key}.scaling.attn_factor"] = float(scaling["attention_factor"]) / (
                1 + 0.1 * math.log(ext.factor))
    if ext.method == "longrope":
        factor = scaling.get("attention_factor")
        if factor is None:              # the default transformers and Phi-3 use
            s = ext.factor
            factor = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) /
                                                  math.log(ext.original_max_position_embeddings))
        meta[f"{key}.scaling.attn_factor"] = float(factor)
    return meta


def rope_tensors(ext: Extension) -> dict[str, torch.Tensor]:
    """The frequency tensors llama.cpp reads for llama3 and longrope, fp32 (head_dim / 2,)."""
    from ..encodings.rope_scaling import compute_inv_freq
    if ext.method == "llama3":
        plain, _ = compute_inv_freq(ext.head_dim, ext.theta, None)
        scaled, _ = compute_inv_freq(ext.head_dim, ext.theta, ext.scaling)
        return {"rope_freqs.weight": (plain / scaled).float()}
    if ext.method == "longrope":
        return {f"rope_factors_{k}.weight": torch.tensor(ext.scaling[f"{k}_factor"],
                                                         dtype=torch.float32)
                for k in ("long", "short")}
    return {}


def write_gguf(model: nn.Module, path: str | os.PathLike, source: str | os.PathLike | None
               = None, overwrite: bool = False) -> Path:
    """Write ``model`` (extended or not) to ``path`` as GGUF; ``source``: a GGUF file the model
    was loaded from, whose tensors are copied unchanged (else the model's weights in fp32).

    The file is written aside (``.posenc-tmp-<name>.<random>.tmp``, a temporary of
    :mod:`posenc.runio` that a crash may leave and a run folder's lock removes), given the
    umask's mode, made durable, then renamed into place."""
    import gguf

    config = model.config
    ext = current_extension(model)
    if ext is None:
        from .extend import make_extension
        ext = make_extension(config, "none")
    out = Path(path)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; choose another file or pass overwrite=True")
    if source is not None:
        reader = gguf.GGUFReader(str(source))
        arch = str(reader.fields["general.architecture"].contents())
    else:
        arch = GGUF_ARCH.get(config.model_type)
        if arch is None:
            raise UserError(f"writing {config.model_type} weights to GGUF is not supported "
                            f"(supported: {', '.join(GGUF_ARCH)}); give the source GGUF file "
                            "to copy its tensors")
    meta, extra = rope_metadata(ext, arch), rope_tensors(ext)

    def write(tmp: Path) -> None:
        writer = gguf.GGUFWriter(str(tmp), arch)
        if source is not None:
            _copy_source(writer, reader, meta, extra)
        else:
            _write_weights(writer, model, arch, meta, extra)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return atomic_write_path(out, write)


def _add_meta(writer: Any, meta: dict[str, Any]) -> None:
    import gguf
    for key, value in meta.items():
        vtype = gguf.GGUFValueType.STRING if isinstance(value, str) else \
            gguf.GGUFValueType.UINT32 if isinstance(value, int) else gguf.GGUFValueType.FLOAT32
        writer.add_key_value(key, value, vtype)


def _copy_source(writer: Any, reader: Any, meta: dict[str, Any],
                 extra: dict[str, torch.Tensor]) -> None:
    """Every key of the source except those ``meta`` sets (and old rope scaling), then the
    source's tensors byte for byte (minus old frequency tensors) and ``extra``."""
    import gguf
    arch = str(reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        name = field.name
        if name.startswith("GGUF.") or name == "general.architecture" or name in meta \
                or name.startswith(f"{arch}.rope.scaling."):
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    _add_meta(writer, meta)
    tensors = [t for t in reader.tensors if not t.name.startswith(("rope_freqs",
                                                                   "rope_factors_"))]
    for t in tensors:
        # quantized tensors are read as bytes: their byte shape, which the writer converts
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    for name, value in extra.items():
        writer.add_tensor(name, value.numpy())


def _write_weights(writer: Any, model: nn.Module, arch: str, meta: dict[str, Any],
                   extra: dict[str, torch.Tensor]) -> None:
    """The model's hyperparameters and fp32 weights under llama.cpp's tensor names."""
    import gguf
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    writer.add_name(getattr(config, "_name_or_path", "") or "posenc-extended")
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_tokenizer_model("none")          # ids only: llama.cpp's LLAMA_VOCAB_TYPE_NONE
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_meta(writer, meta)
    arch_id = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    names = gguf.get_tensor_name_map(arch_id, config.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        if "rotary_emb" in hf_name or "encs" in hf_name or "modules_by_type" in hf_name:
            continue
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise UserError(f"no GGUF name for tensor {hf_name} of a {arch} model")
        data = tensor.detach().float().cpu()
        if arch == "llama" and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            n = heads if "q_proj" in hf_name else kv_heads
            data = data.reshape(n, 2, data.shape[0] // n // 2, *data.shape[1:]) \
                .swapaxes(1, 2).reshape(data.shape)          # llama.cpp's interleaved rows
        writer.add_tensor(name, data.numpy())
    for name, value in extra.items():
        writer.add_tensor(name, value.numpy())
