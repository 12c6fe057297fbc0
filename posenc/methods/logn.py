"""Log-n scaling (Chiang & Cholak 2022, "Overcoming a Theoretical Limitation of
Self-Attention", ACL 2022; Su 2023): each query's logits multiplied by
max(1, log(n) / log(original)), n the keys it sees, so attention entropy stays as pretrained.
An add-on to a frequency method (``yarn:4+logn``) or alone (``logn``)."""

from __future__ import annotations

from .base import Citation, ExtensionMethod, register_method


@register_method
class LogN(ExtensionMethod):
    name = "logn"
    kind = "temperature"
    summary = "logits times max(1, log n / log original)"
    citation = Citation("Chiang & Cholak", 2022, "Overcoming a Theoretical Limitation of "
                        "Self-Attention", "ACL 2022")
    factor_rule = "none"
    reads_factor = False
    needs = "any encoding (a factor on the logits)"
    hf_config_loss = "log-n query scaling"
    gguf_refusal = "llama.cpp has no log-n scaling"
