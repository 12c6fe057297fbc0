"""Transformer-XL: the paper's formula at large positions, the table and rotary forms under
log-n scaling, and ``position_term="auto"``."""

import math

import pytest
import torch

from posenc.attention import attend
from posenc.attention.context import AttentionCall
from posenc.encodings.context import HookContext
from posenc.encodings.sinusoidal import sinusoidal_at
from tests.encodings.helpers import D, H, make, qkv, weights


@pytest.mark.parametrize("position_term", ["table", "rotary"])
def test_xl_matches_the_paper_formula_at_large_positions(position_term):
    pe = make("xl", {"position_term": position_term})
    q, k, v = qkv(3, 5)
    q_pos, k_pos = torch.tensor([7, 3, 5000]), torch.tensor([0, 2, 5, 4990, 5003])
    got = weights(pe, q, k, v, q_pos, k_pos, causal=False)
    r = sinusoidal_at((q_pos[:, None] - k_pos[None, :]).flatten(), H * D).view(3, 5, H * D)
    rk = (r @ pe.pos_proj.weight.t()).view(3, 5, H, D).permute(2, 0, 1, 3)    # (H, Lq, Lk, D)
    logits = (q @ k.transpose(-2, -1)                                         # content
              + torch.einsum("bhid,hijd->bhij", q, rk)                         # content-position
              + torch.einsum("hd,bhjd->bhj", pe.u, k)[:, :, None]              # global content
              + torch.einsum("hd,hijd->hij", pe.v, rk)) / math.sqrt(D)         # global position
    torch.testing.assert_close(got, logits.softmax(-1), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("causal", [True, False])
def test_xl_forms_agree_under_logn_scaling(causal):
    """Log-n multiplies the whole q-side of the logits, (q + u).k and (q + v).R, in both
    forms; checked against the rotary form, whose widened q.k is scaled as a whole."""
    q, k, v = qkv(5, 9)
    q_pos, k_pos = torch.arange(4, 9), torch.arange(9)
    outs = []
    for form in ("table", "rotary"):
        pe = make("xl", {"position_term": form, "logn_base_len": 2})
        q2, k2 = pe.transform_qk(q, k, HookContext.for_positions(q_pos, k_pos))
        call = AttentionCall.for_positions(q_pos, k_pos, causal=causal, backend="eager")
        outs.append(attend(q2, k2, v, pe, call)[0])
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)


def test_xl_auto_uses_the_table_for_runs_and_the_rotary_form_otherwise():
    """position_term="auto": the table for consecutive positions on a backend other than
    flex (training, prefill, decoding), the rotary form (no Lq x Lk table, flex-friendly, no
    table sized by the positions) for flex and for other positions; the same output."""
    pe = make("xl", {})
    q, k, v = qkv(5, 9)
    q_pos, k_pos = torch.arange(4, 9), torch.arange(9)
    outs = []
    for hints, width in (({"consecutive": True}, D),
                         ({"consecutive": True, "backend": "flex"}, D + H * D),
                         ({}, D + H * D)):
        q2, k2 = pe.transform_qk(q, k, HookContext.for_positions(q_pos, k_pos, **hints))
        assert q2.shape[-1] == width
        call = AttentionCall.for_positions(q_pos, k_pos, causal=True, backend="eager",
                                           consecutive=hints.get("consecutive", False))
        outs.append(attend(q2, k2, v, pe, call)[0])
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], atol=1e-5, rtol=1e-5)
