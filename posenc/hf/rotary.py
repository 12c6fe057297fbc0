"""The rotary embedding module that :func:`posenc.hf.extend.extend` puts in place of a Hugging
Face model's ``rotary_emb``: cos/sin from posenc ``rope`` encodings (their ``cos_sin``), in
the layout and dtype the model family's attention expects.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class ExtendedRotary(nn.Module):
    """Stands in for a model's ``rotary_emb``: cos/sin from posenc ``rope`` encodings, one
    per layer type (key None: the extended layers; Gemma 3 passes its layer type).

    forward(x (B, T, C), position_ids (B, T)) -> cos, sin (B, T, D) in x.dtype, in the "half"
    layout Hugging Face uses (the D/2 angles repeated twice), times the attention factor.
    Length-dependent methods use the length ``max(position_ids) + 1``.
    """

    def __init__(self, encs: dict[str | None, nn.Module]) -> None:
        super().__init__()
        self.encs = encs
        # registers each encoding once, so that .to(device) moves its buffers
        self.modules_by_type = nn.ModuleList(dict.fromkeys(encs.values()))
        #: what :func:`posenc.hf.extend.restore` needs (set by ``extend``; not a module)
        self.extension_state = None

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor, layer_type: str | None = None
                ) -> tuple[Tensor, Tensor]:
        enc = self.encs.get(layer_type, self.encs[None])
        seq_len = int(position_ids.max()) + 1 if enc.length_dependent else 0
        # on the encoding's device (a model split over devices may feed positions from
        # another one), the result back on the positions' device
        pos = position_ids.reshape(-1).to(enc.inv_freq.device)
        cos, sin = enc.cos_sin(pos, seq_len)                              # (B*T, D/2) fp32
        shape, to = (*position_ids.shape, -1), (position_ids.device, x.dtype)
        return (torch.cat((cos, cos), -1).view(shape).to(*to),            # (B, T, D)
                torch.cat((sin, sin), -1).view(shape).to(*to))


class NoRotary(ExtendedRotary):
    """Stands in for ``rotary_emb`` once DroPE removed the rotary: cos = 1 and sin = 0 at every
    position, so the family's own rotary helper leaves q and k exactly as projected (every
    layer, every layer type).

    forward(x (B, T, C), position_ids (B, T)) -> cos, sin (B, T, ``head_dim``) in x.dtype.
    """

    def __init__(self, head_dim: int) -> None:
        super().__init__({})
        self.head_dim = head_dim

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor, layer_type: str | None = None
                ) -> tuple[Tensor, Tensor]:
        shape = (*position_ids.shape, self.head_dim)
        ones = torch.ones(shape, device=position_ids.device, dtype=x.dtype)
        return ones, torch.zeros_like(ones)
