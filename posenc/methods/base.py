"""Context-extension methods: each declared once, as one class in one file, in one registry.

A method lets a RoPE model pretrained on ``original`` positions read ``original * factor``
without training, in one of three ways (its ``kind``):

- ``frequency``: new rotary frequencies (position interpolation, NTK, YaRN, ...); the method
  gives the scaling dict of :mod:`posenc.encodings.rope_scaling` (:meth:`rope_scaling`);
- ``temperature``: a factor on the logits of each query (log-n); an add-on to a frequency
  method in the spec grammar (``yarn:4+logn``, :mod:`.spec`);
- ``region``: positions remapped per region of (query, key) pairs (Self-Extend, ReRoPE, ...);
  the method object gives the :class:`~posenc.methods.regions.Region` list attention scores
  each pair from (:class:`~posenc.methods.regions.RegionMethod`);
- ``structural``: the encoding itself is taken out of the model (DroPE removes the rotary of
  every layer), which then needs a short recalibration (:attr:`ExtensionMethod.recalibration`)
  before it is used.

A method class declares everything the rest of posenc reads about it: its options and their
defaults from (original, factor), whether and how it takes a factor, its citation, what it
needs from the model, and whether a Hugging Face config or a GGUF file can express it. Every
command (``posenc list``, ``compare --scalings``, ``extend``, ``arena``) and the Python API
read these declarations; adding a method is one file (and its test) that calls
:func:`register_method`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import UserError
from ..suggest import did_you_mean

#: what a method does (module docstring)
KINDS = ("none", "frequency", "temperature", "region", "structural")
#: how a method reads the factor: ``none`` takes none (1), ``above_one`` needs s > 1,
#: ``at_least_one`` s >= 1 (1 meaning unchanged frequencies or default positions)
FACTOR_RULES = ("none", "above_one", "at_least_one")
#: the largest factor any method takes (larger ones overflow a frequency or a position)
MAX_FACTOR = 1e6


@dataclass(frozen=True)
class Citation:
    """Where a method is defined: ``Jin et al. 2024, Self-Extend (ICML 2024), Sec. 3``."""

    authors: str
    year: int
    title: str
    venue: str = ""
    place: str = ""

    def __str__(self) -> str:
        venue = f" ({self.venue})" if self.venue else ""
        place = f", {self.place}" if self.place else ""
        return f"{self.authors} {self.year}, {self.title}{venue}{place}"

    def short(self) -> str:
        """Without the title: ``Jin et al. 2024 (ICML 2024), Sec. 3``."""
        venue = f" ({self.venue})" if self.venue else ""
        place = f", {self.place}" if self.place else ""
        return f"{self.authors} {self.year}{venue}{place}"


@dataclass(frozen=True)
class Option:
    """One option of a method: ``default(original, factor, earlier)`` gives its value when
    the user gives none (``earlier``: the options resolved before it, in declaration order;
    None: the option is left out, or required where ``required``)."""

    name: str
    doc: str
    default: Callable[[int, float, dict[str, Any]], Any] | None = None
    required: bool = False


class ExtensionMethod:
    """A method's declaration (class attributes) and, once built, its resolved options.

    Subclasses set the class attributes below and are registered with
    :func:`register_method`; :func:`build_method` makes an instance for a model.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "none"
    summary: ClassVar[str] = ""
    citation: ClassVar[Citation | None] = None
    options: ClassVar[tuple[Option, ...]] = ()
    factor_rule: ClassVar[str] = "above_one"
    #: whether the option defaults read the factor (a region method whose defaults do not
    #: takes no factor in a spec: ``rerope``, not ``rerope:4``)
    reads_factor: ClassVar[bool] = True
    #: what it needs from the model, in words
    needs: ClassVar[str] = "RoPE"
    #: None when a Hugging Face config can express it, else what saving it would lose
    hf_config_loss: ClassVar[str | None] = None
    #: None when a GGUF file (llama.cpp) can carry it, else why not
    gguf_refusal: ClassVar[str | None] = None
    #: whether llama.cpp runs it on the plain model from its command line: a GGUF export
    #: then writes the plain model and the built method's ``llama_cpp_flags()``
    llama_cpp_run_time: ClassVar[bool] = False
    #: option defaults for pretrained Hugging Face models where they follow transformers'
    #: behaviour rather than posenc's (dynamic NTK per token)
    hf_defaults: ClassVar[dict[str, Any]] = {}
    #: a structural method's recalibration budget, in words (None: it needs none)
    recalibration: ClassVar[str | None] = None

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(o.name for o in cls.options)

    @classmethod
    def check_factor(cls, factor: float | None) -> float:
        """The factor to use (1.0 for none), or a UserError naming the rule."""
        if cls.factor_rule == "none":
            if factor not in (None, 1, 1.0):
                raise UserError(f"method {cls.name!r} takes no factor, got factor={factor!r}")
            return 1.0
        if factor is None:
            if cls.factor_rule == "at_least_one":
                return 1.0
            raise UserError(f"method {cls.name!r} needs a factor (the context multiplier), "
                            f"e.g. '{cls.name}:4'")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
                or not math.isfinite(factor) or factor > MAX_FACTOR:
            raise UserError(f"factor must be a finite number up to {MAX_FACTOR:g}, got "
                            f"{factor!r}")
        if cls.factor_rule == "above_one" and factor <= 1:
            raise UserError(f"method {cls.name!r} needs factor > 1, got {factor!r}")
        if factor < 1:
            raise UserError(f"method {cls.name!r} needs factor >= 1, got {factor!r}")
        return float(factor)

    @classmethod
    def resolve_options(cls, original: int, factor: float, given: dict[str, Any],
                        hf: bool = False) -> dict[str, Any]:
        """``given`` checked against :attr:`options` and completed with their defaults
        (and :attr:`hf_defaults` when ``hf``)."""
        unknown = sorted(set(given) - set(cls.option_names()))
        if unknown:
            hint = did_you_mean(unknown[0], cls.option_names()) if len(unknown) == 1 else ""
            raise UserError(f"unknown option(s) {', '.join(unknown)}{hint} for method "
                            f"{cls.name!r}; valid options: "
                            f"{', '.join(cls.option_names()) or '(none)'}")
        out: dict[str, Any] = {}
        for option in cls.options:
            if option.name in given:
                out[option.name] = given[option.name]
            elif hf and option.name in cls.hf_defaults:
                out[option.name] = cls.hf_defaults[option.name]
            elif option.default is not None:
                out[option.name] = option.default(original, factor, out)
            elif option.required:
                raise UserError(f"method {cls.name!r} needs option {option.name!r}: "
                                f"{option.doc}")
        return out

    @classmethod
    def create(cls, original: int, factor: float, options: dict[str, Any]) -> Any:
        """The method object for resolved ``options`` (a region method's position map)."""
        return None

    @classmethod
    def rope_scaling(cls, original: int, factor: float, options: dict[str, Any]
                     ) -> dict[str, Any] | None:
        """A frequency method's scaling dict (:mod:`posenc.encodings.rope_scaling`)."""
        return None


_REGISTRY: dict[str, type[ExtensionMethod]] = {}


def register_method(cls: type[ExtensionMethod]) -> type[ExtensionMethod]:
    """Class decorator: add ``cls`` to the registry under ``cls.name`` (checked)."""
    if not cls.name or not cls.name.isidentifier():
        raise ValueError(f"method class {cls.__name__} needs a name (an identifier)")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"method {cls.name!r} is registered twice")
    if cls.kind not in KINDS or cls.factor_rule not in FACTOR_RULES:
        raise ValueError(f"method {cls.name!r}: kind must be one of {KINDS} and factor_rule "
                         f"one of {FACTOR_RULES}")
    _REGISTRY[cls.name] = cls
    return cls


def unregister_method(name: str) -> None:
    """Remove ``name`` from the registry (tests register toy methods)."""
    _REGISTRY.pop(name, None)


def list_methods(kind: str | None = None) -> list[str]:
    """Registered method names (of ``kind`` if given): ``none`` first, then the frequency,
    temperature and region methods, each group sorted by name."""
    return [name for k in KINDS for name, cls in sorted(_REGISTRY.items())
            if cls.kind == k and kind in (None, k)]


def method_class(name: str) -> type[ExtensionMethod]:
    """The class registered as ``name``; a UserError listing the names (with a suggestion
    for a near miss) otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UserError(f"unknown extension method {name!r}{did_you_mean(name, _REGISTRY)}; "
                        f"valid methods: {', '.join(list_methods())}") from None


def build_method(name: str, original: int, factor: float | None = None,
                 **options: Any) -> Any:
    """The method object of region method ``name`` for a model pretrained on ``original``
    positions, meant for ``original * factor``; ``options`` override the defaults."""
    cls = method_class(name)
    if cls.kind != "region":
        raise UserError(f"method {name!r} changes frequencies or logits, not positions per "
                        f"region; region methods: {', '.join(list_methods('region'))}")
    factor = cls.check_factor(factor)
    return cls.create(original, factor, cls.resolve_options(original, factor, options))


def describe_methods() -> list[dict[str, Any]]:
    """One row per method for ``posenc list``: name, kind, factor rule, options, source, and
    whether a Hugging Face config and a GGUF file can hold it."""
    return [{"name": name, "kind": cls.kind, "summary": cls.summary,
             "factor": cls.factor_rule.replace("_", " "),
             "options": list(cls.option_names()), "needs": cls.needs,
             "source": str(cls.citation) if cls.citation else "",
             "cite": cls.citation.short() if cls.citation else "",
             "hf_config": cls.hf_config_loss is None,
             "gguf": cls.gguf_refusal is None} for name in list_methods()
            for cls in [_REGISTRY[name]]]
