"""An encoder-decoder Transformer that takes any registered positional encoding.

The encoder runs bidirectional self-attention over the source; each decoder layer runs masked
self-attention over the target, then cross-attention whose queries come from the decoder and
whose keys/values come from the encoder output. Cross-attention carries no positional
encoding (a ``nope`` instance), as in the original Transformer and T5.

Padded batches: ``src_mask`` (B, S) marks real source tokens (1) and padding (0); the
encoder's self-attention and the decoder's cross-attention never see padding, and source
positions count real tokens only, so a padded source gives the outputs of the unpadded one
on its real tokens. ``tgt_mask`` (B, T) does the same for the decoder's targets; the loss
ignores targets equal to ``pad_id``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import AttentionContext, KVCache, make_caches
from ..attention.cache import replay_if_stale
from ..encodings import PositionalEncoding, build_encoding
from ..encodings.checks import check_token_ids
from ..encodings.registry import with_model_facts
from ..errors import UserError
from .blocks import Block, init_weights, make_norm
from .generate import checks_each_token, logits_broken, raise_broken_logits, select_next
from .plans import distinct, plan_encodings
from .positions import check_mask, positions_from_mask
from .seq2seq_config import Seq2SeqConfig


class Seq2SeqTransformer(nn.Module):
    """``model(src, tgt_in) -> logits (B, T, V)``; ``loss`` for teacher forcing; greedy
    ``generate`` with self-attention KV caches and cached encoder keys/values."""

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = c = config
        self.src_tok = nn.Embedding(c.source_vocab_size, c.d_model)
        self.tgt_tok = (self.src_tok if c.share_embeddings
                        else nn.Embedding(c.vocab_size, c.d_model))
        encoder_facts = {"vocab_size": c.source_vocab_size, "n_layers": c.n_encoder_layers,
                         "d_model": c.d_model}
        decoder_facts = {"vocab_size": c.vocab_size, "n_layers": c.n_decoder_layers,
                         "d_model": c.d_model}
        encoder_options = with_model_facts(c.encoder_pe, c.encoder_options(), **encoder_facts)
        decoder_options = with_model_facts(c.decoder_pe_name, c.decoder_options(),
                                           **decoder_facts)
        self.encoder_specs, self.decoder_specs = c.encoder_specs(), c.decoder_specs()
        encoder_pes = None if c.encoder_plan is None else plan_encodings(
            self.encoder_specs, lambda name, options: self._encoding(
                name, with_model_facts(name, options, **encoder_facts)))
        self.encoder_pe = (self._encoding(c.encoder_pe, encoder_options)
                           if encoder_pes is None else encoder_pes[0])
        if c.decoder_plan is None:
            self.decoder_pe = self._encoding(c.decoder_pe_name, decoder_options)
            layer_pes = None
        else:
            layer_pes = plan_encodings(self.decoder_specs, lambda name, options: self._encoding(
                name, with_model_facts(name, options, **decoder_facts)))
            self.decoder_pe = layer_pes[0]         # the input's encoding (plans: none adds)
        self.decoder_encodings = [self.decoder_pe] if layer_pes is None else distinct(layer_pes)
        self.cross_pe = self._encoding("nope", {})
        self.encoder = (self._stack(c.n_encoder_layers, self.encoder_pe, c.encoder_pe,
                                    encoder_options, cross=False) if encoder_pes is None
                        else self._planned_stack(encoder_pes, self.encoder_specs, cross=False))
        self.decoder = (self._stack(c.n_decoder_layers, self.decoder_pe, c.decoder_pe_name,
                                    decoder_options, cross=True) if layer_pes is None
                        else self._planned_stack(layer_pes, self.decoder_specs, cross=True))
        def final_norm() -> nn.Module:                      # pre-norm stacks end with one
            return (make_norm(c.norm, c.d_model, c.norm_eps) if c.norm_placement == "pre"
                    else nn.Identity())
        self.encoder_norm, self.decoder_norm = final_norm(), final_norm()
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.drop = nn.Dropout(c.dropout)
        # residual branches: 2 per encoder layer, 3 (self, cross, MLP) per decoder layer
        init_weights(self, max(2 * c.n_encoder_layers, 3 * c.n_decoder_layers))
        if c.tie_embeddings:
            self.head.weight = self.tgt_tok.weight

    # ------------------------------------------------------------- building
    def _encoding(self, name: str, options: dict) -> PositionalEncoding:
        c = self.config
        return build_encoding(name, n_heads=c.n_heads, head_dim=c.head_dim, max_len=c.max_len,
                              **options)

    def _stack(self, n_layers: int, shared: PositionalEncoding, name: str, options: dict, *,
               cross: bool) -> nn.ModuleList:
        """``n_layers`` blocks; each has its own encoding instance if the encoding is
        per-layer (the first layer's is ``shared``, so no parameter sits unused), else they
        all use ``shared``."""
        c = self.config
        return nn.ModuleList(
            Block(c.d_model, c.n_heads, c.d_ff or 4 * c.d_model, activation=c.activation,
                  norm=c.norm, norm_placement=c.norm_placement, dropout=c.dropout,
                  bias=c.bias, cross=cross, norm_eps=c.norm_eps, sinks=c.attn_sinks,
                  pe=(shared if i == 0 else self._encoding(name, options))
                  if shared.per_layer else None)
            for i in range(n_layers))

    def _planned_stack(self, layer_pes: list[PositionalEncoding], specs, *, cross: bool
                       ) -> nn.ModuleList:
        """The blocks of a stack under its plan: each with its layer's encoding, window and
        sinks."""
        c = self.config
        return nn.ModuleList(
            Block(c.d_model, c.n_heads, c.d_ff or 4 * c.d_model, activation=c.activation,
                  norm=c.norm, norm_placement=c.norm_placement, dropout=c.dropout,
                  bias=c.bias, cross=cross, norm_eps=c.norm_eps, pe=pe, window=spec.window,
                  sinks=spec.sinks)
            for pe, spec in zip(layer_pes, specs))

    def make_caches(self, batch: int, target_len: int, source_len: int
                    ) -> tuple[list[KVCache], list[KVCache]]:
        """Empty per-decoder-layer (self-attention, cross-attention) caches."""
        c, p = self.config, self.head.weight
        windows = [spec.window for spec in self.decoder_specs]
        return (make_caches(c.n_decoder_layers, batch, c.n_heads, c.head_dim, target_len,
                            p.dtype, p.device, windows=windows),
                make_caches(c.n_decoder_layers, batch, c.n_heads, c.head_dim, source_len,
                            p.dtype, p.device))

    # -------------------------------------------------------------- running
    @staticmethod
    def _check_ids(name: str, ids: Tensor, vocab_size: int) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != 2 or 0 in ids.shape:
            got = f"shape {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids).__name__
            raise UserError(f"{name} must be (batch, length) with batch >= 1 and length >= 1, "
                            f"got {got}")
        check_token_ids(name, ids, vocab_size)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (B, S) -> encoder output (B, S, C); ``src_mask`` (B, S): 1 for real tokens,
        0 for padding."""
        self._check_ids("src", src, self.config.source_vocab_size)
        valid = None if src_mask is None else check_mask("src_mask", src_mask, src.shape)
        if valid is None:
            pos = torch.arange(src.shape[1], device=src.device)
        else:
            pos = positions_from_mask(valid, src.new_zeros(src.shape[0]))
        x = self.drop(self.encoder_pe.embed(self.src_tok(src), pos, ids=src))   # (B, S, C)
        ctx = AttentionContext(pos, causal=False, consecutive=valid is None, key_valid=valid,
                               backend=self.config.attn_backend)
        for block in self.encoder:
            x, _ = block(x, ctx, self.encoder_pe)
        return self.encoder_norm(x)

    def decode(self, memory: Tensor, tgt_in: Tensor, caches: list[KVCache] | None = None,
               cross_caches: list[KVCache] | None = None, *,
               memory_mask: Tensor | None = None, tgt_mask: Tensor | None = None) -> Tensor:
        """Decoder logits (B, T, V) for tgt_in (B, T) given the encoder output (B, S, C).

        ``memory_mask`` (B, S): the source's padding (``src_mask``), hidden from
        cross-attention; ``tgt_mask`` (B, T): the targets' padding. With caches, positions
        continue after the self-attention caches' contents and the cross-attention caches
        keep the encoder keys/values (and their mask) after their first use.
        """
        self._check_ids("tgt_in", tgt_in, self.config.vocab_size)
        if memory.dim() != 3 or memory.shape[0] != tgt_in.shape[0]:
            raise UserError(f"memory must be (batch, source length, d_model) with the batch "
                             f"of tgt_in ({tgt_in.shape[0]}), got {tuple(memory.shape)}")
        b, t = tgt_in.shape
        memory_valid = None if memory_mask is None else \
            check_mask("memory_mask", memory_mask, memory.shape[:2])
        valid = None if tgt_mask is None else check_mask("tgt_mask", tgt_mask, (b, t))
        first = caches[0] if caches else None
        start = first.length if first is not None else 0
        if valid is None and (first is None or not first.per_sample):
            pos = torch.arange(start, start + t, device=tgt_in.device)
            after = first.next_pos + t if first is not None else None
        elif valid is None:
            pos = first.next_pos[:, None] + torch.arange(t, device=tgt_in.device)
            after = first.next_pos + t
        else:
            begin = first.next_pos if first is not None else tgt_in.new_zeros(b)
            pos = positions_from_mask(valid, begin)
            after = begin + valid.sum(dim=1)
        consecutive = pos.dim() == 1
        if first is not None:
            first.next_pos = after
            tgt_in, pos, valid = replay_if_stale(  # length-dependent: a stale history
                self.decoder_encodings, tgt_in, pos, caches, valid,
                seq_len=start + t if consecutive else None)
        if memory_valid is None:
            memory_pos = torch.arange(memory.shape[1], device=memory.device)
        else:
            memory_pos = positions_from_mask(memory_valid, memory.new_zeros(b, dtype=torch.long))
        x = self.decoder_pe.embed(self.tgt_tok(tgt_in), pos, ids=tgt_in,
                                  state=caches[0].extra if caches else None)
        x = self.drop(x)                                                        # (B, T, C)
        ctx = AttentionContext(pos, causal=True, consecutive=consecutive, key_valid=valid,
                               backend=self.config.attn_backend, memory=memory,
                               memory_pos=memory_pos, memory_valid=memory_valid)
        for i, block in enumerate(self.decoder):
            x, _ = block(x, ctx, self.decoder_pe, caches[i] if caches else None,
                         cross_caches[i] if cross_caches else None, self.cross_pe)
        return self.head(self.decoder_norm(x))[:, -t:]                          # (B, T, V)

    def forward(self, src: Tensor, tgt_in: Tensor, *, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None) -> Tensor:
        """src (B, S), tgt_in (B, T) -> logits (B, T, V) for the next target token.
        ``src_mask`` (B, S), ``tgt_mask`` (B, T): 1 for real tokens, 0 for padding."""
        if src.dim() == 2 and tgt_in.dim() == 2 and src.shape[0] != tgt_in.shape[0]:
            raise UserError(f"src and tgt_in batch sizes differ: {src.shape[0]} and "
                             f"{tgt_in.shape[0]}")
        return self.decode(self.encode(src, src_mask), tgt_in, memory_mask=src_mask,
                           tgt_mask=tgt_mask)

    def loss(self, src: Tensor, tgt: Tensor, pad_id: int | None = None, *,
             src_mask: Tensor | None = None) -> Tensor:
        """Teacher-forcing cross-entropy: predict tgt[:, 1:] from tgt[:, :-1].

        tgt (B, T) starts with the BOS token; targets equal to ``pad_id`` are ignored (and,
        as inputs, hidden from the decoder); ``src_mask`` (B, S) marks real source tokens.
        """
        if tgt.dim() != 2 or tgt.shape[1] < 2:
            raise UserError(f"tgt must be (batch, length) with length >= 2 (BOS + at least "
                             f"one token), got shape {tuple(tgt.shape)}")
        tgt_mask = None if pad_id is None else tgt[:, :-1] != pad_id
        logits = self(src, tgt[:, :-1], src_mask=src_mask, tgt_mask=tgt_mask)   # (B, T-1, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(),
                               ignore_index=-100 if pad_id is None else pad_id)

    @torch.no_grad()
    def generate(self, src: Tensor, max_new_tokens: int, bos_id: int,
                 eos_id: int | None = None, *, src_mask: Tensor | None = None,
                 use_cache: bool = True) -> Tensor:
        """Greedy decoding -> (B, 1 + n): BOS then n <= ``max_new_tokens`` tokens.

        ``src_mask`` (B, S) marks real source tokens of a padded batch. Stops early once
        every sequence has produced ``eos_id``; a finished sequence is filled with
        ``eos_id``. ``use_cache=False`` re-runs the decoder over the whole prefix at every
        step (the reference the cached path must equal).
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
                or max_new_tokens < 0:
            raise UserError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        for name, token in (("bos_id", bos_id), ("eos_id", eos_id)):
            if token is not None and (isinstance(token, bool) or not isinstance(token, int)
                                      or not 0 <= token < self.config.vocab_size):
                raise UserError(f"{name} must be in [0, {self.config.vocab_size}), "
                                 f"got {token}")
        memory = self.encode(src, src_mask)
        out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        caches, cross_caches = (self.make_caches(src.shape[0], max(max_new_tokens, 1),
                                                 src.shape[1]) if use_cache else (None, None))
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        each = checks_each_token(src.device, streaming=False)
        broken = torch.zeros((), dtype=torch.bool, device=src.device)
        for _ in range(max_new_tokens):
            step_in = out[:, -1:] if use_cache else out
            logits = self.decode(memory, step_in, caches, cross_caches,
                                 memory_mask=src_mask)[:, -1]                  # (B, V)
            if not each:
                broken |= logits_broken(logits)                  # read once, after the loop
            nxt = select_next(logits, check=each)                               # (B, 1)
            if eos_id is not None:
                nxt = nxt.masked_fill(finished[:, None], eos_id)
                finished |= nxt[:, 0] == eos_id
            out = torch.cat([out, nxt], dim=1)
            if eos_id is not None and bool(finished.all()):    # stopping early reads the
                break                                          # device once a token
        if not each and broken:
            raise_broken_logits()
        return out
