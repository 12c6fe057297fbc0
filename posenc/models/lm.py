"""A decoder-only Transformer language model that takes any registered positional encoding.

Positions are an explicit (T,) tensor passed down the stack; with a KV cache they continue
from the cache's length, so cached decoding equals a full forward pass for every encoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..attention import AttentionContext, KVCache, make_caches
from ..attention.cache import check_caches, replay_if_stale
from ..attention.latent import LatentShape, check_latent_encoding, make_latent_cache
from ..attention.stick_breaking import ATTN_FORMS, check_composes
from ..encodings import build_encoding, encoding_class
from ..encodings.checks import (
    check_positions,
    check_token_ids,
    require_choice,
    require_int_at_least,
    require_options,
    require_positive_int,
)
from ..encodings.registry import with_model_facts
from ..errors import UserError
from .blocks import Block, init_weights, make_norm
from .config import ModelShape
from .generate import checks_each_token, logits_broken, raise_broken_logits, select_next
from .plans import LayerSpec, distinct, plan_encodings, require_plan_fits, resolve_plan
from .positions import (
    axis_positions,
    check_documents,
    check_mask,
    distances_match_indices,
    positions_from_documents,
    positions_from_mask,
)


@dataclass(frozen=True)
class LMConfig(ModelShape):
    """Shape and options of a :class:`TransformerLM` (the shared fields: :class:`ModelShape`).

    ``pe`` names a registered encoding and ``pe_options`` are its options (see
    ``posenc list``; None means no options, like {}); what the encoding needs to know about
    the model (``vocab_size``, ``n_layers``, ``d_model``) it gets from this config. ``max_len``
    is the training length: the size of a learned table and the default original length for
    RoPE scalings.

    ``plan`` (None: ``pe`` in every layer) gives each layer its encoding, options, attention
    window and sinks: a named plan ("gemma3", "smollm3", "llama4") or a dict
    (:mod:`posenc.models.plans`).

    ``mla`` (None: standard multi-head attention) makes every layer multi-head latent
    attention with decoupled RoPE (DeepSeek-V2): a mapping of
    :class:`~posenc.attention.latent.LatentShape`'s fields (``kv_lora_rank``,
    ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``, ``q_lora_rank``); the
    encoding then works on each head's ``qk_rope_head_dim`` rotary part. Not with a plan or
    sinks.

    ``attn_form``: "softmax" (default) or "stick_breaking", the attention of every layer
    (:mod:`posenc.attention.stick_breaking`: it replaces the softmax, so it is a form of
    attention, not an encoding; it composes with encodings acting on q/k or the input
    and refuses those that add a bias or a value term).
    """

    n_layers: int = 2
    pe: str = "rope"
    pe_options: dict[str, Any] = field(default_factory=dict)
    plan: Any = None
    mla: Any = None
    attn_form: str = "softmax"

    NEW_FIELD_DEFAULTS: ClassVar[dict[str, Any]] = {**ModelShape.NEW_FIELD_DEFAULTS,
                                                    "mla": None, "attn_form": "softmax"}
    DICT_ORDER: ClassVar[tuple[str, ...]] = (
        "vocab_size", "d_model", "n_layers", "n_heads", "max_len", "d_ff", "activation",
        "norm", "norm_eps", "norm_placement", "dropout", "bias", "tie_embeddings", "pe",
        "pe_options", "attn_backend", "plan", "attn_sinks", "mla", "attn_form")

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive_int("n_layers", self.n_layers)
        if not isinstance(self.pe, str):
            raise UserError(f"pe must be the name of an encoding (posenc list), got "
                             f"{self.pe!r}")
        object.__setattr__(self, "pe_options", require_options("pe_options", self.pe_options))
        if self.plan is not None:
            require_plan_fits(self.layer_specs())
        require_choice("attn_form", self.attn_form, ATTN_FORMS)
        if self.attn_form == "stick_breaking":
            for spec in self.layer_specs():
                check_composes(encoding_class(spec.pe), spec.sinks)
        if self.mla is not None:
            object.__setattr__(self, "mla", asdict(LatentShape.from_dict(self.mla)))
            if self.plan is not None or self.attn_sinks:
                raise UserError("mla (latent attention) applies to every layer alike: no "
                                "plan and no attn_sinks with it")
            if self.attn_form != "softmax":
                raise UserError("mla (latent attention) has only the softmax form: no "
                                f"attn_form={self.attn_form!r} with it")
            check_latent_encoding(encoding_class(self.pe))

    @property
    def latent(self) -> LatentShape | None:
        """The latent attention shape of every layer, or None (``mla``)."""
        return None if self.mla is None else LatentShape(**self.mla)

    @property
    def cache_shape(self) -> tuple[int, int]:
        """(heads, dim) of each layer's cached keys: (1, latent + rotary key) with mla."""
        latent = self.latent
        return (self.n_heads, self.head_dim) if latent is None else (1, latent.cache_dim)

    def layer_specs(self) -> tuple[LayerSpec, ...]:
        """Each layer's encoding, options, window and sinks (:mod:`posenc.models.plans`)."""
        return resolve_plan(self.plan, n_layers=self.n_layers, max_len=self.max_len,
                            pe=self.pe, pe_options=self.pe_options,
                            attn_sinks=self.attn_sinks)


class TransformerLM(nn.Module):
    """Decoder-only LM: ``model(ids) -> logits (B, T, V)``; ``generate`` uses a KV cache."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.tok = nn.Embedding(c.vocab_size, c.d_model)
        self.specs = c.layer_specs()
        if c.plan is None:
            self.pe = self._build_pe()
            layer_pes = [self._layer_pe(i) for i in range(c.n_layers)]
            self.encodings = [self.pe]
        else:
            layer_pes = plan_encodings(self.specs, self._build_pe)
            self.pe = layer_pes[0]                 # the input's encoding (plans: none adds)
            self.encodings = distinct(layer_pes)
        self.blocks = nn.ModuleList(
            Block(c.d_model, c.n_heads, c.d_ff or 4 * c.d_model, activation=c.activation,
                  norm=c.norm, norm_placement=c.norm_placement, dropout=c.dropout,
                  bias=c.bias, pe=layer_pes[i], norm_eps=c.norm_eps,
                  window=self.specs[i].window, sinks=self.specs[i].sinks,
                  latent=c.latent, form=c.attn_form)
            for i in range(c.n_layers))
        self.norm = (make_norm(c.norm, c.d_model, c.norm_eps) if c.norm_placement == "pre"
                     else nn.Identity())
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.drop = nn.Dropout(c.dropout)
        init_weights(self, 2 * c.n_layers)           # two residual branches per block
        if c.tie_embeddings:
            self.head.weight = self.tok.weight

    def _build_pe(self, name: str | None = None, options: dict | None = None):
        c = self.config
        name, options = (c.pe, c.pe_options) if name is None else (name, options)
        options = with_model_facts(name, options, vocab_size=c.vocab_size,
                                   n_layers=c.n_layers, d_model=c.d_model)
        head_dim = c.head_dim if c.latent is None else c.latent.qk_rope_head_dim
        return build_encoding(name, n_heads=c.n_heads, head_dim=head_dim, max_len=c.max_len,
                              **options)

    def _layer_pe(self, index: int):
        """Layer ``index``'s own encoding for per-layer encodings (layer 0 reuses the model's,
        so no parameter sits unused), else None: the layer uses the shared one."""
        if not self.pe.per_layer:
            return None
        return self.pe if index == 0 else self._build_pe()

    def use_shared_encoding(self, pe) -> None:
        """Put ``pe`` in place of the encoding every layer shares (no layer plan, no per-layer
        encoding). A parameter-free encoding for another (a training scaffold: DroPE trains
        with RoPE, then without it) leaves the weights and their state dict as they are."""
        if self.config.plan is not None or self.pe.per_layer or pe.per_layer:
            raise UserError("the shared encoding can be swapped only in a model without a "
                            "layer plan or per-layer encodings")
        self.pe, self.encodings = pe, [pe]

    def build_encoding(self, name: str, options: dict | None = None):
        """An encoding ``name`` (``options``) built for this model's shape."""
        return self._build_pe(name, dict(options or {}))

    @property
    def has_windows(self) -> bool:
        """Whether some layer attends through a window (sliding or chunked)."""
        return any(spec.window is not None for spec in self.specs)

    def make_caches(self, batch: int, capacity: int) -> list[KVCache]:
        """Empty per-layer KV caches for ``batch`` sequences of up to ``capacity`` tokens (a
        rolling cache of what the window sees for a layer with a window)."""
        require_int_at_least("batch", batch, 1)
        require_int_at_least("capacity", capacity, 1)
        p = self.tok.weight
        if self.config.latent is not None:
            return [make_latent_cache(batch, self.config.latent, capacity, p.dtype, p.device)
                    for _ in range(self.config.n_layers)]
        return make_caches(self.config.n_layers, batch, self.config.n_heads,
                           self.config.head_dim, capacity, p.dtype, p.device,
                           windows=[spec.window for spec in self.specs])

    def _check_ids(self, ids: Tensor) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            got = f"shape {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids).__name__
            raise UserError(f"ids must be (batch, length), got {got}")
        check_token_ids("ids", ids, self.config.vocab_size)

    def forward(self, ids: Tensor, *, positions: Tensor | None = None,
                attention_mask: Tensor | None = None, document_ids: Tensor | None = None,
                caches: list[KVCache] | None = None, backend: str | None = None,
                need_weights: bool = False) -> Tensor | tuple[Tensor, list[Tensor | None]]:
        """ids (B, T) -> logits (B, T, V).

        ``attention_mask`` (B, T): 1 for real tokens, 0 for padding (left-padded prompts,
        padded batches): no token sees a padding token, and positions count real tokens
        only. ``document_ids`` (B, T): documents packed into each row; each restarts at
        position 0 and sees only itself (not with caches). ``positions`` (T,) or (B, T)
        overrides the positions (default: 0..T-1 per sequence, as the masks say, continuing
        after the caches' contents); for an encoding with ``position_axes`` A > 1 (M-RoPE,
        axial RoPE), positions (A, B, T) give each token's position along each axis instead
        (masks and caches then count tokens as without positions). With ``need_weights``
        also returns each layer's attention weights (B, H, T, Lk). See
        :mod:`posenc.models.positions`.
        """
        self._check_ids(ids)
        if ids.shape[0] == 0:
            raise UserError(f"ids must hold at least one sequence (batch >= 1), got shape "
                            f"{tuple(ids.shape)}")
        b, t = ids.shape
        if caches is not None:
            check_caches(caches, b, *self.config.cache_shape,
                         [spec.window for spec in self.specs])
        key_valid = None if attention_mask is None else \
            check_mask("attention_mask", attention_mask, (b, t))
        documents = None if document_ids is None else check_documents(document_ids, (b, t))
        if documents is not None and caches:
            raise UserError("document_ids (packed rows) cannot be combined with KV caches; "
                             "decode each document on its own")
        axes = None
        if isinstance(positions, Tensor) and positions.dim() == 3:
            axes, positions = axis_positions(positions, self.pe.position_axes, (b, t)), None
        built = positions is None and axes is None
        positions, consecutive = self._positions(ids, positions, key_valid, documents, caches)
        if caches:
            ids, positions, key_valid = replay_if_stale(
                self.encodings, ids, positions, caches, key_valid,
                seq_len=caches[0].length + t if consecutive else None)
        layer_positions = positions
        if built and not caches and all(e.translation_invariant for e in self.encodings) and \
                distances_match_indices(key_valid, documents):
            # the same distances at every visible pair, as one run shared by the batch
            layer_positions, consecutive = torch.arange(t, device=ids.device), True
        x = self.pe.embed(self.tok(ids), positions, ids=ids,
                          state=caches[0].extra if caches else None)
        x = self.drop(x)                                              # (B, T, C)
        ctx = AttentionContext(layer_positions, causal=True, consecutive=consecutive,
                               key_valid=key_valid, documents=documents,
                               backend=backend or self.config.attn_backend,
                               need_weights=need_weights, axes=axes,
                               window_pos=positions if layer_positions is not positions
                               and self.has_windows else None)
        all_weights = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, ctx, self.pe, caches[i] if caches else None)
            all_weights.append(w)
        logits = self.head(self.norm(x))[:, -t:]                      # (B, T, V)
        if need_weights:
            return logits, [w if w is None else w[:, :, -t:] for w in all_weights]
        return logits

    def _positions(self, ids: Tensor, positions: Tensor | None, key_valid: Tensor | None,
                   documents: Tensor | None, caches: list[KVCache] | None
                   ) -> tuple[Tensor, bool]:
        """The positions of this forward ((T,) or (B, T)) and whether they are the one run
        start..start + T - 1 this model built; records where each sequence continues."""
        b, t = ids.shape
        first = caches[0] if caches else None
        start = first.next_pos if first is not None else ids.new_zeros(b)      # (B,)
        consecutive = False
        if positions is not None:
            check_positions("positions", positions, t, b)
            after = positions[..., -1] + 1
        elif documents is not None:
            positions = positions_from_documents(documents)
            after = None
        elif key_valid is not None:
            positions = positions_from_mask(key_valid, start)
            after = start + key_valid.sum(dim=1)
        elif first is not None and first.per_sample:  # the cache holds padded sequences
            positions = start[:, None] + torch.arange(t, device=ids.device)
            after = start + t
        else:
            offset = first.length if first is not None else 0
            positions = torch.arange(offset, offset + t, device=ids.device)
            consecutive, after = True, start + t
        if first is not None:
            first.next_pos = after.expand(b)
        return positions, consecutive

    @torch.no_grad()
    def generate(self, ids: Tensor, max_new_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None,
                 on_token: Callable[[int, Tensor], bool | None] | None = None, *,
                 attention_mask: Tensor | None = None) -> Tensor:
        """Append ``max_new_tokens`` tokens to ids (B, T) using a KV cache -> (B, T + new).

        ``attention_mask`` (B, T) marks real tokens (0: padding) of a left-padded batch of
        prompts: each row then gets the tokens it would get alone. Greedy at temperature 0,
        else sampled (``top_k``, ``top_p``: see :func:`~posenc.models.generate.select_next`).
        ``on_token(step, tokens (B, 1))`` is called as each new token is chosen (streaming);
        when it returns True generation stops there (the result then ends with that token).
        """
        require_int_at_least("max_new_tokens", max_new_tokens, 0)
        self._check_ids(ids)
        if ids.numel() == 0:
            raise UserError(f"ids must hold at least one prompt of at least one token, got "
                            f"shape {tuple(ids.shape)}")
        caches = self.make_caches(ids.shape[0], ids.shape[1] + max_new_tokens)
        logits = self(ids, attention_mask=attention_mask, caches=caches)
        out = [ids]
        each = checks_each_token(logits.device, on_token is not None)
        broken = torch.zeros((), dtype=torch.bool, device=logits.device)
        for step in range(max_new_tokens):
            last = logits[:, -1]                                      # (B, V)
            if not each:
                broken |= logits_broken(last)                         # read after the loop
            nxt = select_next(last, temperature, top_k, generator, top_p=top_p, check=each)
            out.append(nxt)                                           # (B, 1)
            if on_token is not None and on_token(step, nxt) is True:
                break
            if step + 1 < max_new_tokens:
                logits = self(nxt, caches=caches)
        if not each and broken:
            raise_broken_logits()
        return torch.cat(out, dim=1)
