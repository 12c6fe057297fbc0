"""Positional encodings behind one interface.

Importing this package imports every module in it, and each module registers its encodings
with ``@register(name)``; a new encoding needs no edit here.
"""

import importlib
import pkgutil

from .base import PositionalEncoding, register
from .context import HookContext
from .registry import (
    build_encoding,
    describe_encodings,
    encoding_class,
    encoding_options,
    list_encodings,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["HookContext", "PositionalEncoding", "build_encoding", "describe_encodings",
           "encoding_class", "encoding_options", "list_encodings", "register"]
