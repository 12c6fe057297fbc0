"""posenc: positional encodings for Transformers behind one interface."""

from .encodings import PositionalEncoding, build_encoding, describe_encodings, list_encodings
from .models import LMConfig, TransformerLM

__version__ = "0.1.0"
__all__ = ["LMConfig", "PositionalEncoding", "TransformerLM", "build_encoding",
           "describe_encodings", "list_encodings"]
