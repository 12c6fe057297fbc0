"""DroPE (Gelberg, Eguchi, Akiba & Cetin 2026, "Extending the Context of Pretrained LLMs by
Dropping Their Positional Embeddings", ICLR 2026, Sec. 4): a model trained with RoPE has the
rotary of every layer removed, then a short recalibration (next-token training) at the
original context length lets it work without positional embeddings; it is then read at
longer contexts with no further change (zero-shot extension; the paper's Fig. 1: needle in a
haystack at 2x the training context, 28-42 % for DroPE against 0-22 % for PI, NTK and YaRN).

Unlike the frequency and region methods it changes the weights (through the recalibration):
``posenc.hf.extend(model, "drope")`` removes the rotary, :func:`posenc.hf.recalibrate` runs the
fine-tune of :mod:`posenc.hf.finetune` at the original length, and the lab trains a ``drope``
variant that drops RoPE for the last part of its budget.
"""

from __future__ import annotations

from .base import Citation, ExtensionMethod, Option, register_method

#: the recalibration a pretrained model gets by default: optimizer steps, windows per step,
#: learning rate (the paper recalibrates on well under 1 % of the pretraining tokens)
RECALIBRATION_STEPS, RECALIBRATION_BATCH, RECALIBRATION_LR = 200, 4, 1e-4


@register_method
class DroPE(ExtensionMethod):
    name = "drope"
    kind = "structural"
    summary = "every layer's rotary removed, then a recalibration at the original length"
    citation = Citation("Gelberg et al.", 2026, "Extending the Context of Pretrained LLMs by "
                        "Dropping Their Positional Embeddings", "ICLR 2026", "Sec. 4, Fig. 1")
    factor_rule = "none"
    reads_factor = False
    options = (Option("steps", f"recalibration steps (default {RECALIBRATION_STEPS})",
                      lambda original, factor, _: RECALIBRATION_STEPS),
               Option("batch_size", f"windows of the original length per step (default "
                      f"{RECALIBRATION_BATCH})", lambda original, factor, _: RECALIBRATION_BATCH),
               Option("lr", f"recalibration learning rate (default {RECALIBRATION_LR:g})",
                      lambda original, factor, _: RECALIBRATION_LR))
    needs = "RoPE in every layer, and a recalibration (fine-tune at the original length)"
    hf_config_loss = "a model without rotary embeddings (the family's attention always rotates)"
    gguf_refusal = "llama.cpp applies RoPE to every layer of these architectures"
    recalibration = (f"{RECALIBRATION_STEPS} steps of {RECALIBRATION_BATCH} windows of the "
                     f"original length, lr {RECALIBRATION_LR:g}")
