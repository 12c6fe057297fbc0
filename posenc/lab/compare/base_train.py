"""The training every comparison starts from, and config dicts of older versions read in the
current layout.

Config dicts written before training and model settings were nested (flat ``steps``,
``d_model``, ...) were trained with :data:`BASE_TRAIN` where they name no other value;
:func:`migrate_config` nests them. The presets (:mod:`posenc.lab.compare.presets`), growth
(:mod:`posenc.lab.compare.growth`) and results.json (:mod:`posenc.lab.compare.results`) all
read configs through it.
"""

from __future__ import annotations

from typing import Any

from ...models.lm import LMConfig
from ...train.config import TrainConfig

#: the training every comparison starts from (presets replace some of it); ``model.pe``,
#: ``model.pe_options``, ``model.vocab_size``, ``seed`` and ``checkpoint_every`` are set
#: per run by :meth:`~posenc.lab.compare.presets.CompareConfig.train_config`
BASE_TRAIN = TrainConfig(model=LMConfig(d_model=128, n_layers=2, n_heads=4, max_len=64),
                         train_len=64, batch_size=32, steps=600, lr=2e-3, eval_every=0)
#: fields of the config dict before training and model settings were nested (results.json
#: written by older versions): they moved into ``train`` and ``train.model``
FLAT_TRAIN_KEYS = ("train_len", "steps", "batch_size", "lr", "warmup_steps", "weight_decay",
                   "grad_clip", "seed", "bf16", "data", "tokenizer")
FLAT_MODEL_KEYS = ("d_model", "n_layers", "n_heads")


def migrate_config(data: dict[str, Any]) -> dict[str, Any]:
    """The nested form of a config dict: one written before training and model settings
    were nested (flat ``steps``, ``d_model``, ...) has them moved into ``train`` and
    ``train.model``, the rest of ``train`` being what runs were trained with then
    (:data:`BASE_TRAIN`); a nested dict is returned unchanged."""
    if "train" in data or not set(FLAT_TRAIN_KEYS + FLAT_MODEL_KEYS) & set(data):
        return data
    out = {k: v for k, v in data.items() if k not in FLAT_TRAIN_KEYS + FLAT_MODEL_KEYS}
    train = BASE_TRAIN.to_dict() | {k: data[k] for k in FLAT_TRAIN_KEYS if k in data}
    model = train["model"] | {k: data[k] for k in FLAT_MODEL_KEYS if k in data}
    out["train"] = train | {"model": model | {"max_len": train["train_len"]}}
    return out
