"""Optimizer parameter groups: which parameters get weight decay.

Weight decay pulls every decayed parameter towards zero. That is the intended prior for the
weight matrices of the network (and the token embedding, tied to the output projection), but
not for:

- norm gains and biases (vectors): decaying a LayerNorm gain towards 0 fights the
  normalisation it exists for;
- the parameters of positional encodings (learned absolute tables, T5's bias per bucket,
  Shaw's and DeBERTa's relative tables, KERPLE's and FIRE's few scalars, ...): they are
  per-position quantities whose scale the encoding's paper fixes (a logit bias, a table added
  to the embeddings); decaying them drags a learned position signal back to "no position".

(The usual recipe of GPT-2 descendants, e.g. minGPT, decays Linear and Embedding weights and
nothing else; position tables are excluded here for the reason above.)
"""

from __future__ import annotations

from torch import nn

from ..encodings.base import PositionalEncoding


def param_groups(model: nn.Module, weight_decay: float, lr: float) -> list[dict]:
    """AdamW groups, each with its ``lr``: ``weight_decay`` on the network's matrices
    (dim >= 2); none on vectors (norms, biases) nor on positional-encoding parameters, which
    train at ``lr`` times their encoding's ``lr_scale`` (1 unless the encoding sets one).

    The first group trains at ``lr`` (what a log reports as the lr). Empty groups are
    dropped; a parameter shared by two modules (tied embeddings) appears once.
    """
    scale_of = {id(p): float(getattr(m, "lr_scale", 1.0)) for m in model.modules()
                if isinstance(m, PositionalEncoding) for p in m.parameters()}
    decay, no_decay = [], []
    scaled: dict[float, list] = {}
    for p in model.parameters():                # deduplicates tied parameters
        if not p.requires_grad:
            continue
        scale = scale_of.get(id(p))
        if scale is None:
            (decay if p.dim() >= 2 else no_decay).append(p)
        elif scale == 1.0:
            no_decay.append(p)
        else:
            scaled.setdefault(scale, []).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay, "lr": lr},
              {"params": no_decay, "weight_decay": 0.0, "lr": lr}]
    groups += [{"params": ps, "weight_decay": 0.0, "lr": lr * scale}
               for scale, ps in scaled.items()]
    return [g for g in groups if g["params"]]
