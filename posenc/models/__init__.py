"""Transformer models that take any positional encoding."""

from .lm import LMConfig, TransformerLM
from .positions import positions_from_documents, positions_from_mask
from .seq2seq import Seq2SeqTransformer
from .seq2seq_config import Seq2SeqConfig

__all__ = ["LMConfig", "Seq2SeqConfig", "Seq2SeqTransformer", "TransformerLM",
           "positions_from_documents", "positions_from_mask"]
