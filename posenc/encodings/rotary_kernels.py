"""Pure functions that rotate query/key pairs: the hot path of every rotary encoding."""

from __future__ import annotations

import torch
from torch import Tensor


def rotary_angles(pos: Tensor, inv_freq: Tensor) -> Tensor:
    """Angles pos * inv_freq in fp32. pos (L,), inv_freq (R/2,) -> (L, R/2)."""
    return pos.to(torch.float32)[:, None] * inv_freq.to(pos.device, torch.float32)[None, :]


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "half") -> Tensor:
    """Rotate the first R dims of x. x (..., L, D); cos, sin (L, R/2) fp32 -> (..., L, D).

    ``cos``/``sin`` may carry an attention factor (they then have norm != 1).
    """
    rot = 2 * cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    if layout == "interleaved":
        # one complex multiply: (x0 + i x1) * (cos + i sin)
        work = x_rot.float().reshape(*x_rot.shape[:-1], rot // 2, 2)    # (..., L, R/2, 2)
        rotated = torch.view_as_real(torch.view_as_complex(work.contiguous())
                                     * torch.complex(cos, sin)).flatten(-2)  # (..., L, R)
    else:
        x1, x2 = x_rot.float().chunk(2, dim=-1)                          # (..., L, R/2) each
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    rotated = rotated.to(x.dtype)
    return rotated if x_pass.shape[-1] == 0 else torch.cat((rotated, x_pass), dim=-1)
