"""The recalibration a structural method needs (DroPE: Gelberg et al. 2026, ICLR 2026, Sec. 4):
after :func:`posenc.hf.extend` removed every layer's rotary, a short next-token fine-tune at
the model's original context length (:func:`posenc.hf.finetune.finetune`), so the model learns
to work from the causal mask alone; it is then read at longer contexts unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from ..errors import UserError
from ..methods import method_class
from .extend import current_extension
from .finetune import FinetuneConfig, finetune


def recalibration_config(model: nn.Module, **overrides: object) -> FinetuneConfig:
    """The fine-tune of the structural method ``model`` is extended with: its declared budget
    (``steps``, ``batch_size``, ``lr``: the method's options as ``extend`` resolved them) at
    the original length; ``overrides`` replace any FinetuneConfig field."""
    ext = current_extension(model)
    if ext is None or method_class(ext.method).kind != "structural":
        raise UserError("recalibrate applies to a model extended with a structural method "
                        "(posenc.hf.extend(model, 'drope')); extend it first")
    budget = dict(ext.attention or {})
    fields = {"steps": budget.get("steps"), "batch_size": budget.get("batch_size"),
              "lr": budget.get("lr"), "length": ext.original_max_position_embeddings}
    fields = {k: v for k, v in {**fields, **overrides}.items() if v is not None}
    return FinetuneConfig(**fields)


def recalibrate(model: nn.Module, tokens: Tensor,
                progress: Callable[[int], None] | None = None,
                **overrides: object) -> list[float]:
    """Recalibrate ``model`` (extended with ``drope``) in place on windows of its original
    length from the 1-D token stream ``tokens``; returns the loss of every step."""
    return finetune(model, tokens, recalibration_config(model, **overrides), progress)
