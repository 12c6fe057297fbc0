"""No extension: the model as pretrained (the baseline every method is compared with)."""

from __future__ import annotations

from .base import ExtensionMethod, register_method


@register_method
class NoExtension(ExtensionMethod):
    name = "none"
    kind = "none"
    summary = "the model as pretrained"
    factor_rule = "none"
    reads_factor = False
    needs = "nothing"
