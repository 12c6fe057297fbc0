"""A model validates its positions once per forward, not once per layer: it builds one
attention context and every layer reads it."""

from __future__ import annotations

import sys

import pytest
import torch

from posenc import LMConfig, Seq2SeqConfig, Seq2SeqTransformer, TransformerLM
from posenc.attention import AttentionContext, MultiHeadAttention
from posenc.encodings import build_encoding, checks

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def position_checks(monkeypatch) -> list[str]:
    """The names passed to every ``check_positions`` call, wherever it was imported."""
    calls: list[str] = []
    real = checks.check_positions

    def counting(name, *args, **kwargs):
        calls.append(name)
        return real(name, *args, **kwargs)

    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "") or "").startswith("posenc") and \
                getattr(module, "check_positions", None) is real:
            monkeypatch.setattr(module, "check_positions", counting)
    return calls


def _lm(n_layers: int, pe: str = "alibi") -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(LMConfig(pe=pe, d_model=16, n_heads=2, n_layers=n_layers,
                                  vocab_size=32, max_len=32))


@pytest.mark.parametrize("pe", ["alibi", "rope", "shaw"])
def test_a_forward_validates_positions_once_whatever_the_depth(position_checks, pe):
    ids = torch.randint(0, 32, (2, 6), generator=torch.Generator().manual_seed(1))
    counts = {}
    for n_layers in (1, 4):
        model = _lm(n_layers, pe)
        position_checks.clear()
        model(ids)
        counts[n_layers] = list(position_checks)
    assert counts[1] == counts[4] == ["positions"]
    # given positions (checked as the argument, then in the context) and a cached step
    for n_layers in (1, 4):
        model = _lm(n_layers, pe)
        caches = model.make_caches(2, 8)
        position_checks.clear()
        model(ids, positions=torch.arange(6) + 3)
        model(ids[:, :1], caches=caches)
        counts[n_layers] = list(position_checks)
    assert counts[1] == counts[4] == ["positions"] * 3


def test_attention_layers_do_not_validate_positions(position_checks):
    attn, pe = MultiHeadAttention(16, 2), build_encoding("rope", n_heads=2, head_dim=8)
    ctx = AttentionContext(torch.arange(5), causal=True)
    position_checks.clear()
    for _ in range(3):
        attn(torch.randn(1, 5, 16), ctx, pe)
    assert position_checks == []


def test_seq2seq_validates_per_stack_not_per_layer(position_checks):
    counts = []
    for layers in (1, 3):
        torch.manual_seed(0)
        model = Seq2SeqTransformer(Seq2SeqConfig(encoder_pe="t5", vocab_size=16, d_model=16,
                                                 n_heads=2, n_encoder_layers=layers,
                                                 n_decoder_layers=layers))
        position_checks.clear()
        model(torch.tensor([[4, 5, 0]]), torch.tensor([[1, 7]]),
              src_mask=torch.tensor([[1, 1, 0]]))
        counts.append(list(position_checks))
    assert counts[0] == counts[1]
