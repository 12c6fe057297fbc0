"""The relative family (shaw, xl, deberta, tupe): formulas, properties, backends, caches.

The DeBERTa formula itself is checked against Hugging Face in test_deberta_oracle.py.
"""

import pytest
import torch

from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_config import Seq2SeqConfig

from tests.encodings.helpers import D, H


@pytest.mark.parametrize("name", ["shaw", "xl", "deberta", "tupe"])
def test_encoder_decoder_with_bidirectional_encoder(name):
    options = {"shaw": {"max_relative_position": 3},
               "deberta": {"position_buckets": 4, "max_relative_positions": 8},
               "tupe": {"num_buckets": 8, "max_distance": 16}, "xl": {}}[name]
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(
        vocab_size=16, d_model=H * D, n_heads=H, n_encoder_layers=1, n_decoder_layers=1,
        max_len=32, encoder_pe=name, encoder_pe_options=options)).eval()
    src = torch.randint(2, 16, (2, 9), generator=torch.Generator().manual_seed(0))
    cached = model.generate(src, 6, bos_id=1)
    torch.testing.assert_close(cached, model.generate(src, 6, bos_id=1, use_cache=False))
