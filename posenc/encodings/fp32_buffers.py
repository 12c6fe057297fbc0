"""Frequencies that stay fp32 when a model is cast to a lower precision."""

from __future__ import annotations

from typing import ClassVar


class KeepsFp32Buffers:
    """Mixin for an ``nn.Module``: the buffers named in ``FP32_BUFFERS`` (those it has) keep
    their fp32 values when the module is cast (``model.to(torch.bfloat16)``, ``.half()``);
    they still follow the module to its device. Angles computed from bf16 frequencies lose
    the position at a few thousand tokens, so the rotary family keeps them exact."""

    FP32_BUFFERS: ClassVar[tuple[str, ...]] = ("inv_freq", "turns_rest")

    def _apply(self, fn, recurse=True):
        kept = {name: getattr(self, name) for name in self.FP32_BUFFERS if hasattr(self, name)}
        super()._apply(fn, recurse)
        for name, value in kept.items():
            setattr(self, name, value.to(getattr(self, name).device))
        return self
