"""Context-extension methods, one file each, in one registry (see :mod:`.base`).

``posenc.methods.build_method("self_extend", 4096, 4)``, ``parse_method_spec("yarn:4+logn")``,
``list_methods()``. Importing this package imports every module in it, and each method module
registers its class with ``@register_method``; a new method needs no edit here.
"""

import importlib
import pkgutil

from .base import (
    Citation,
    ExtensionMethod,
    Option,
    build_method,
    describe_methods,
    list_methods,
    method_class,
    register_method,
    unregister_method,
)
from .frequency import FrequencyMethod
from .regions import Region, RegionMethod, relative_positions
from .spec import (
    ADDONS,
    MAX_FACTOR,
    MethodSpec,
    format_factor,
    parse_method_spec,
    sources_lines,
    spec_citation,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ADDONS", "MAX_FACTOR", "Citation", "ExtensionMethod", "FrequencyMethod",
           "MethodSpec", "Option", "Region", "RegionMethod", "build_method",
           "describe_methods", "format_factor", "list_methods", "method_class",
           "parse_method_spec", "register_method", "relative_positions", "sources_lines",
           "spec_citation", "unregister_method"]
