"""T5 relative position bias (Raffel et al., 2020): a learned scalar per head and bucket.

Distances up to ``max_exact = num_buckets/2`` (halved again when bidirectional) get their own
bucket; larger ones share log-spaced buckets up to ``max_distance``, beyond which they clip.

Training rate of the table. The table holds logits (added to ``q.k * sm_scale``), so it keeps
the meaning of T5's checkpoints. With Adam each entry moves by about ``lr`` per step whatever
its role: at lr 2e-3 a few hundred steps move a bias by about one logit, while the recency a
language model wants is several logits (ALiBi's steepest head gives -16 at distance 64). T5
itself trained with Adafactor (Shazeer & Stern, 2018), whose steps are relative to each
parameter's scale, so the paper fixes no absolute rate. The table therefore declares
``lr_scale = sqrt(head_dim)``, which :func:`posenc.train.optim.param_groups` applies: the
rate in logit units that x-transformers (Wang) gets by storing the table divided by
sqrt(head_dim). It is initialised N(0, 0.02), like the token embeddings.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..errors import UserError
from .base import register
from .checks import require_int_at_least
from .relative_bias import BiasFunction, DistanceBiasEncoding


def relative_position_bucket(relative_position: Tensor, bidirectional: bool = True,
                             num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's bucket of ``relative_position = key_pos - query_pos`` (any int shape -> same shape).

    Bidirectional: half the buckets for keys after the query. Unidirectional: keys after the
    query fall into bucket 0 (a causal mask hides them).
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # log-spaced buckets from max_exact to max_distance
    large = max_exact + (
        torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


@register("t5")
class T5Encoding(DistanceBiasEncoding):
    """Learned per-head bias over log-spaced distance buckets.

    Options: ``bidirectional`` (False for decoders), ``num_buckets`` (32),
    ``max_distance`` (128).
    """

    extrapolates = "yes (distances past max_distance share one bucket)"
    distance_only = True

    @property
    def lr_scale(self) -> float:
        """Learning-rate multiplier of the table (see the module docstring)."""
        return math.sqrt(self.head_dim)

    def __init__(self, *, bidirectional: bool = False, num_buckets: int = 32,
                 max_distance: int = 128, **kw) -> None:
        super().__init__(**kw)
        if not isinstance(bidirectional, bool):
            raise UserError(f"bidirectional must be True or False, got {bidirectional!r}")
        require_int_at_least("num_buckets", num_buckets, 4 if bidirectional else 2)
        require_int_at_least("max_distance", max_distance, 1)
        max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
        if max_distance <= max_exact:
            raise UserError(f"max_distance must be > {max_exact} (the exact-bucket range for "
                             f"num_buckets={num_buckets}), got {max_distance}")
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bias = nn.Embedding(num_buckets, self.n_heads)
        nn.init.normal_(self.bias.weight, std=0.02)

    def saturation(self) -> int:
        """Distances from max_distance on share the last bucket."""
        return self.max_distance

    def bias_function(self) -> BiasFunction:
        table, options = self.bias.weight, (self.bidirectional, self.num_buckets,
                                            self.max_distance)

        def bias(rel: Tensor, head: Tensor) -> Tensor:
            return table[relative_position_bucket(rel, *options), head].float()

        return bias
