"""Transformer models that take any positional encoding."""

from .lm import LMConfig, TransformerLM

__all__ = ["LMConfig", "TransformerLM"]
