"""What every posenc Transformer config holds: its width, heads, blocks and vocabulary, with
their checks, its dict form and loading from one, written once for
:class:`~posenc.models.lm.LMConfig` and :class:`~posenc.models.seq2seq_config.Seq2SeqConfig`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar

from ..attention import BACKENDS
from ..encodings.checks import (
    require_choice,
    require_divides,
    require_float_in,
    require_known_keys,
    require_positive_int,
)
from ..errors import UserError
from .blocks import ACTIVATIONS, NORMS

Config = TypeVar("Config", bound="ModelShape")


@dataclass(frozen=True)
class ModelShape:
    """Fields and checks shared by the model configs (a base class; use a subclass).

    ``max_len`` is the longest sequence the encodings must serve (a learned table's size);
    ``d_ff`` defaults to 4 * d_model; ``norm`` is "layernorm" | "rmsnorm" and
    ``norm_placement`` "pre" | "post"; ``tie_embeddings`` ties the output layer to the
    (target) token embedding. ``attn_sinks`` gives every self-attention layer a learned
    sink logit per head (gpt-oss; a plan may set it per layer type).
    """

    vocab_size: int = 256
    d_model: int = 128
    n_heads: int = 4
    max_len: int = 256
    d_ff: int | None = None                 # default 4 * d_model
    activation: str = "gelu"
    norm: str = "layernorm"                 # "layernorm" | "rmsnorm"
    norm_eps: float = 1e-5
    norm_placement: str = "pre"             # "pre" | "post"
    dropout: float = 0.0
    bias: bool = False
    tie_embeddings: bool = True
    attn_backend: str = "auto"
    attn_sinks: bool = False

    #: fields added after configs were first saved, left out of :meth:`to_dict` while they
    #: hold these defaults (so a saved config of before reads and writes the same)
    NEW_FIELD_DEFAULTS: ClassVar[dict[str, Any]] = {"attn_sinks": False, "plan": None}

    #: the order of :meth:`to_dict`'s keys, each subclass's own (saved configs keep it); a
    #: field not named here comes after them
    DICT_ORDER: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "max_len"):
            require_positive_int(name, getattr(self, name))
        require_divides(self.n_heads, self.d_model)
        if self.d_ff is not None:
            require_positive_int("d_ff", self.d_ff)
        require_choice("activation", self.activation, ACTIVATIONS)
        require_choice("norm", self.norm, NORMS)
        require_float_in("norm_eps", self.norm_eps, 0.0, 1.0)
        require_choice("norm_placement", self.norm_placement, ("pre", "post"))
        require_float_in("dropout", self.dropout, 0.0, 1.0, low_open=False)
        require_choice("attn_backend", self.attn_backend, BACKENDS)
        require_flags(self, "bias", "tie_embeddings", "attn_sinks")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain values, keys in :attr:`DICT_ORDER` (fields of
        :attr:`NEW_FIELD_DEFAULTS` only when they differ from their default)."""
        data = asdict(self)
        for name, default in self.NEW_FIELD_DEFAULTS.items():
            if name in data and data[name] == default:
                del data[name]
        order = [name for name in self.DICT_ORDER if name in data]
        return {name: data[name] for name in order + [n for n in data if n not in order]}

    @classmethod
    def from_dict(cls: type[Config], data: Any) -> Config:
        """The config a :meth:`to_dict` mapping describes; UserError naming unknown keys or
        a value that is not a mapping."""
        data = require_known_keys(cls.__name__, data, (f.name for f in fields(cls)))
        return cls(**data)


def require_flags(config: object, *names: str) -> None:
    """UserError unless each field ``names`` of ``config`` is True or False."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, bool):
            raise UserError(f"{name} must be True or False, got {value!r}")
