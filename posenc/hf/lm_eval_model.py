"""posenc's extension methods inside lm-evaluation-harness (``lm-eval`` 0.4.x): the model
``posenc``.

``posenc`` is lm-eval's own ``hf`` model (:class:`lm_eval.models.huggingface.HFLM`: the same
batching, tokenization, rolling windows and generation) around a model that
:func:`posenc.hf.load_model` loads (``smollm2``, a .gguf file, a model directory or a hub
name) and :func:`posenc.hf.extend` extends. Its ``model_args``:

- ``pretrained``: what :func:`~posenc.hf.load_model` takes;
- ``method``: a method spec (``yarn``, ``yarn:4+logn``, ``self_extend``; ``posenc list``),
  ``factor`` and ``original`` (the pretraining context, default the config's);
- the method's own options by name (``window=...,group=...`` for self_extend; list-valued
  options such as LongRoPE's factors only through Python's ``model_args`` dict);
- ``dtype`` (float32, the default, float16, bfloat16, float64), ``device`` (lm-eval's
  ``--device``; the CPU where CUDA is named and missing, as for ``hf``: lm-eval names
  ``cuda:0`` unless told otherwise), ``attn_implementation`` (default sdpa),
  ``gguf_cache`` (default: the dequantized GGUF is kept in posenc's cache folder;
  ``false``: not kept; a folder);
- anything else goes to HFLM (``batch_size``, ``max_length``, ``add_bos_token``, ...).
  ``max_length`` defaults to the context the extension declares (:attr:`Extension.
  context_length`: the original context times the factor, at least the model's own), so
  rolling windows and truncation follow the extended context, region methods included.

Region methods and the exact cache need positions 0..n-1 for every sequence: lm-eval's
loglikelihood batches are right-padded without a mask (each row keeps its positions), but its
generation batches are left-padded, so ``posenc`` generates one request at a time for them.
Length-dependent methods (dynamic, longrope) see the length of the padded batch, as with
``hf``; ``batch_size=1`` (the default) scores each request at its own length.

lm-eval 0.4 finds models only in its own registry (it reads no entry points), so the name
``posenc`` exists once this module is imported: ``posenc lm-eval run --model posenc ...``
(:func:`run_lm_eval`) imports it and runs lm-eval's command line with the same arguments;
from Python, import this module before :func:`lm_eval.simple_evaluate`. Needs the
``lmeval`` extra (``pip install 'posenc[lmeval]'``).
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from ..errors import UserError
from ..methods import method_class, parse_method_spec
from .extend import Extension, extend
from .load import MODEL_DTYPES, default_gguf_cache, load_model

#: the name lm-eval's ``--model`` takes
MODEL_NAME = "posenc"
#: the add-ons a ``model_args`` entry may switch on (as ``extend``'s keyword options)
ADDON_OPTIONS = ("logn", "exact_cache")
#: HFLM's arguments about finding and loading a model, which posenc does itself
LOADING_ARGS = ("tokenizer", "revision", "subfolder", "trust_remote_code", "use_fast_tokenizer",
                "peft", "delta", "autogptq", "gptqmodel", "gguf_file", "parallelize",
                "tp_plan", "max_memory_per_gpu", "max_cpu_memory", "offload_folder")


@register_model(MODEL_NAME)
class PosencLM(HFLM):
    """lm-eval's ``hf`` model around a model extended with :func:`posenc.hf.extend`.

    ``extension`` is the :class:`~posenc.hf.extend.Extension` applied; ``source`` the name
    the model was loaded from.
    """

    def __init__(self, pretrained: str, method: str | None = "none",
                 factor: float | None = None, original: int | None = None,
                 dtype: str | torch.dtype = "float32", device: str | None = None,
                 attn_implementation: str = "sdpa", gguf_cache: bool | str | None = True,
                 max_length: int | None = None, **kwargs: Any) -> None:
        spec = parse_method_spec("none" if method is None else str(method))
        names = set(method_class(spec.name).option_names()) | set(ADDON_OPTIONS)
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        _check_hflm_args(kwargs, spec.name, names)
        loaded = load_model(str(pretrained), dtype=_dtype(dtype),
                            attn_implementation=attn_implementation,
                            gguf_cache=_gguf_cache(gguf_cache), device=_device(device))
        self.extension: Extension = extend(loaded.model, str(method or "none"), factor,
                                           original, **options)
        self.source = str(pretrained)
        with _quiet("lm_eval.models.huggingface"):      # its notes on a model passed in
            super().__init__(pretrained=loaded.model, tokenizer=loaded.tokenizer,
                             max_length=max_length or self.extension.context_length,
                             **kwargs)
        ext = self.extension
        #: positions must be 0..n-1 in every row: no left-padded generation batches
        self.one_at_a_time = ext.attention is not None or ext.exact_cache

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """lm-eval's generation; one request at a time under a region method or the exact
        cache (a left-padded batch would shift their positions)."""
        if not self.one_at_a_time:
            return super().generate_until(requests, disable_tqdm)
        batch = self.batch_size_per_gpu
        self.batch_size_per_gpu = 1
        try:
            return super().generate_until(requests, disable_tqdm)
        finally:
            self.batch_size_per_gpu = batch

    def get_model_info(self) -> dict[str, Any]:
        """What results.json records of the model: its source, size, dtype and extension
        (no hub look-up: the model is given as an object)."""
        return {"model_source": self.source,
                "model_num_parameters": sum(p.numel() for p in self.model.parameters()),
                "model_dtype": str(self.model.dtype),
                "posenc_extension": self.extension.as_dict()}


def _check_hflm_args(kwargs: dict[str, Any], method: str, options: set[str]) -> None:
    """A UserError naming a ``model_args`` entry that neither posenc, the method nor HFLM
    reads, or one about loading the model (which posenc does)."""
    loading = sorted(set(kwargs) & set(LOADING_ARGS))
    if loading:
        raise UserError(f"model_args {', '.join(loading)}: the posenc model loads the model "
                        "and its tokenizer itself (pretrained=smollm2, a .gguf file, a model "
                        "directory or a hub name)")
    hflm = set(inspect.signature(HFLM.__init__).parameters) - {"self", "pretrained", "kwargs"}
    unknown = sorted(set(kwargs) - hflm)
    if unknown:
        ours = sorted(set(inspect.signature(PosencLM.__init__).parameters) - {"self", "kwargs"})
        raise UserError(f"unknown model_args {', '.join(unknown)} for the posenc model; it "
                        f"reads {', '.join(ours)}, the options of method {method!r} "
                        f"({', '.join(sorted(options))}) and those of lm-eval's hf model")


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in MODEL_DTYPES:
        raise UserError(f"model_args dtype must be one of {', '.join(MODEL_DTYPES)}, got "
                        f"{dtype!r}")
    return getattr(torch, dtype)


def _device(device: str | None) -> str:
    """``device``; the CUDA GPU when there is one and none is named (``auto`` too), else the
    CPU. A CUDA device on a machine without CUDA also means the CPU, as in lm-eval's ``hf``
    model: lm-eval's command line names ``cuda:0`` unless told otherwise."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(str(device)).type
    except RuntimeError:
        raise UserError(f"model_args device {device!r} is not a device torch knows (cpu, "
                        "cuda, cuda:1, mps, ...)") from None
    if kind == "cuda" and not torch.cuda.is_available():
        logging.getLogger(__name__).warning("device %s: CUDA is not available, using the CPU",
                                            device)
        return "cpu"
    return str(device)


def _gguf_cache(cache: bool | str | None) -> str | None:
    """The folder a dequantized GGUF model is kept in: posenc's cache for True, none for
    False or None, else the folder given."""
    if cache is True:
        return str(default_gguf_cache())
    return None if cache in (False, None) else str(cache)


@contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """Only errors from ``logger`` while inside."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def run_lm_eval(argv: list[str]) -> int:
    """lm-eval's command line (``lm-eval run ...``, ``lm-eval ls tasks``) with ``argv``, the
    ``posenc`` model registered; returns its exit status."""
    from lm_eval.__main__ import cli_evaluate
    saved = sys.argv
    sys.argv = ["lm-eval", *argv]
    try:
        cli_evaluate()
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
    return 0
