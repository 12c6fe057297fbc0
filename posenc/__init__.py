"""posenc: positional encodings for Transformers behind one interface."""

from .encodings import (
                        HookContext,
                        PositionalEncoding,
                        build_encoding,
                        describe_encodings,
                        list_encodings,
)
from .models import LMConfig, Seq2SeqConfig, Seq2SeqTransformer, TransformerLM

__version__ = "0.1.0"
__all__ = ["HookContext", "LMConfig", "PositionalEncoding", "Seq2SeqConfig",
           "Seq2SeqTransformer", "TransformerLM", "build_encoding", "describe_encodings",
           "list_encodings"]
