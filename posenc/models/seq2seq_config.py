"""Configuration of the encoder-decoder Transformer."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ..encodings import encoding_class, encoding_options
from ..encodings.checks import require_options, require_positive_int
from ..errors import UserError
from .config import ModelShape, require_flags
from .plans import LayerSpec, require_plan_fits, resolve_plan


@dataclass(frozen=True)
class Seq2SeqConfig(ModelShape):
    """Shape and options of a :class:`~posenc.models.seq2seq.Seq2SeqTransformer`.

    ``encoder_pe`` / ``decoder_pe`` name registered encodings for the encoder's and the
    decoder's self-attention (``posenc list``); cross-attention has no positional encoding.
    ``decoder_pe=None`` reuses the encoder's encoding, and ``decoder_pe_options=None`` then
    reuses its options too ({} when the decoder names its own encoding);
    ``encoder_pe_options=None`` means no options, like {}. An encoder encoding
    with a ``bidirectional`` option gets ``bidirectional=True`` unless the options set it;
    other encoder-only choices (e.g. ``conv``'s ``padding="centered"``) go in
    ``encoder_pe_options``, with ``decoder_pe_options={}`` so the decoder keeps its defaults.

    ``vocab_size`` is the target vocabulary; ``src_vocab_size`` defaults to it.
    ``share_embeddings`` uses one table for source and target tokens (vocabularies must
    match); ``tie_embeddings`` ties the output layer to the target embedding. ``max_len`` is
    the longest source or target length the encodings must serve (a learned table's size).

    ``decoder_plan`` (None: the decoder's encoding in every decoder layer) gives each decoder
    layer its encoding, options, window and sinks, as ``LMConfig.plan``
    (:mod:`posenc.models.plans`); ``encoder_plan`` does the same for the encoder's layers,
    without windows (posenc's windows are causal). Encoder layer types get
    ``bidirectional=True`` like ``encoder_pe``.
    """

    src_vocab_size: int | None = None       # default vocab_size
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    share_embeddings: bool = True
    encoder_pe: str = "rope"
    encoder_pe_options: dict[str, Any] = field(default_factory=dict)
    decoder_pe: str | None = None           # default encoder_pe
    decoder_pe_options: dict[str, Any] | None = None
    decoder_plan: Any = None
    encoder_plan: Any = None

    NEW_FIELD_DEFAULTS: ClassVar[dict[str, Any]] = {"attn_sinks": False, "decoder_plan": None,
                                                    "encoder_plan": None}

    DICT_ORDER: ClassVar[tuple[str, ...]] = (
        "vocab_size", "src_vocab_size", "d_model", "n_encoder_layers", "n_decoder_layers",
        "n_heads", "max_len", "d_ff", "activation", "norm", "norm_eps", "norm_placement",
        "dropout", "bias", "share_embeddings", "tie_embeddings", "encoder_pe",
        "encoder_pe_options", "decoder_pe", "decoder_pe_options", "attn_backend",
        "attn_sinks", "encoder_plan", "decoder_plan")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("n_encoder_layers", "n_decoder_layers"):
            require_positive_int(name, getattr(self, name))
        if self.src_vocab_size is not None:
            require_positive_int("src_vocab_size", self.src_vocab_size)
        require_flags(self, "share_embeddings")
        if self.share_embeddings and self.source_vocab_size != self.vocab_size:
            raise UserError(
                f"share_embeddings=True needs src_vocab_size == vocab_size, got "
                f"{self.src_vocab_size} and {self.vocab_size}; set share_embeddings=False")
        for name in ("encoder_pe", "decoder_pe"):
            value = getattr(self, name)
            if not isinstance(value, str) and not (name == "decoder_pe" and value is None):
                raise UserError(f"{name} must be the name of an encoding (posenc list), got "
                                 f"{value!r}")
        encoding_class(self.encoder_pe)                         # unknown name -> UserError
        encoding_class(self.decoder_pe_name)
        object.__setattr__(self, "encoder_pe_options",
                           require_options("encoder_pe_options", self.encoder_pe_options))
        if self.decoder_pe_options is not None:
            object.__setattr__(self, "decoder_pe_options",
                               require_options("decoder_pe_options", self.decoder_pe_options))
        if self.decoder_plan is not None:
            require_plan_fits(self.decoder_specs())
        if self.encoder_plan is not None:
            specs = self.encoder_specs()
            windowed = [spec.type for spec in specs if spec.window is not None]
            if windowed:
                raise UserError(f"encoder_plan: layer type {windowed[0]!r} has a window; "
                                 f"windows apply to causal self-attention only (use them in "
                                 f"decoder_plan)")
            require_plan_fits(specs)

    def encoder_specs(self) -> tuple[LayerSpec, ...]:
        """Each encoder layer's encoding, options and sinks (``bidirectional=True`` where the
        encoding has that option and the plan did not set it)."""
        specs = resolve_plan(self.encoder_plan, n_layers=self.n_encoder_layers,
                             max_len=self.max_len, pe=self.encoder_pe,
                             pe_options=self.encoder_options(), attn_sinks=self.attn_sinks)
        return tuple(replace(spec, pe_options={"bidirectional": True, **spec.pe_options})
                     if "bidirectional" in encoding_options(spec.pe) else spec
                     for spec in specs)

    def decoder_specs(self) -> tuple[LayerSpec, ...]:
        """Each decoder layer's encoding, options, window and sinks."""
        return resolve_plan(self.decoder_plan, n_layers=self.n_decoder_layers,
                            max_len=self.max_len, pe=self.decoder_pe_name,
                            pe_options=self.decoder_options(), attn_sinks=self.attn_sinks)

    @property
    def source_vocab_size(self) -> int:
        return self.vocab_size if self.src_vocab_size is None else self.src_vocab_size

    @property
    def decoder_pe_name(self) -> str:
        return self.encoder_pe if self.decoder_pe is None else self.decoder_pe

    def encoder_options(self) -> dict[str, Any]:
        """Options for the encoder's encoding: ``bidirectional=True`` where it has that option
        and the user did not set it."""
        options = dict(self.encoder_pe_options)
        if "bidirectional" in encoding_options(self.encoder_pe):
            options.setdefault("bidirectional", True)
        return options

    def decoder_options(self) -> dict[str, Any]:
        """Options for the decoder's encoding (see the class docstring for the defaults)."""
        if self.decoder_pe_options is not None:
            return dict(self.decoder_pe_options)
        return dict(self.encoder_pe_options) if self.decoder_pe is None else {}
