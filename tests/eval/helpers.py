"""For the evaluation tests: a tiny model and a random token stream."""

import torch

from posenc.models import LMConfig, TransformerLM


def tiny(pe: str, max_len: int = 16, seed: int = 0, **options) -> TransformerLM:
    torch.manual_seed(seed)
    config = LMConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, max_len=max_len,
                      pe=pe, pe_options=options)
    return TransformerLM(config).eval()


def stream(n: int = 200, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 32, (n,), generator=torch.Generator().manual_seed(seed))
