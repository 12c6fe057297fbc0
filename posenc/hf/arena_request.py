"""What ``posenc arena`` is asked to measure (:class:`ArenaRequest`, compared on resume), its
presets (:data:`PRESETS`, :func:`preset_request`) and how to run it (:class:`ArenaRuntime`,
not compared): the inputs of :class:`posenc.hf.arena.ArenaStudy`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..study import encode
from ..study.ray_units import RayCluster
from .ruler import FAMILIES

#: methods of the CPU preset (a subset: every method costs the whole grid again): no
#: extension, the three RoPE rescalings people ship most, and four region methods (Leaky
#: ReRoPE, which attends twice like ReRoPE, is left to ``--methods all``)
CPU_METHODS = ("none", "linear", "ntk", "yarn", "self_extend", "rerope", "dual_chunk",
               "streaming")
#: RULER families of the CPU preset (:mod:`posenc.hf.ruler`): multi-hop tracing and
#: aggregation, the two kinds of task the arena's needles and passkeys do not test, and the
#: cheapest (30- and 50-token answers; a needle family's 128-token budget costs about twice as
#: much per sample); common words need more than 512 tokens. The README gives the cost.
CPU_TASKS = ("vt", "fwe")
#: RULER's lengths (Hsieh et al. 2024, Sec. 4: 4K to 128K tokens); the gpu preset keeps those
#: up to factor x the original context
RULER_LENGTHS = (4096, 8192, 16384, 32768, 65536, 131072)
#: the presets' wall time on the 2-core CPU machine (minutes; None: not run here), quoted by
#: ``posenc arena --help`` and the README; cpu: measured end to end, RULER's vt and fwe
#: included, in an installed checkout on a quiet machine
PRESET_MINUTES: dict[str, float | None] = {"cpu": 21.6, "gpu": None}


#: results.json keys of the request's fields that are spelled otherwise there
SETTING_KEYS = {"eval_windows": "windows"}
#: the request's RULER fields (left out of the setting when no RULER task runs)
RULER_KEYS = ("tasks", "ruler_samples", "ruler_lengths")


@dataclass(frozen=True)
class ArenaRequest:
    """What the arena measures (compared on resume). ``"all"`` among the methods: every method
    of :func:`~posenc.methods.list_methods` (log-n as an add-on only) that needs nothing but a
    factor (DroPE, which needs its recalibration, is named on its own: the gpu preset's
    ``("all", "drope")``); ``original=None``: the
    model's native context; ``lengths=None``: ``multiples`` x ``original`` and ``factor`` x
    ``original``."""

    model: str = "smollm2"
    text: str | None = None
    dtype: str = "float32"
    methods: tuple[str, ...] = CPU_METHODS
    factor: float = 4.0
    original: int | None = 512
    lengths: tuple[int, ...] | None = None
    multiples: tuple[float, ...] = (1.0, 2.0)
    depths: tuple[float, ...] = (0.0, 0.5, 1.0)
    needles: int = 2
    passkey_trials: int = 1
    eval_windows: int = 2
    tasks: tuple[str, ...] = ()
    ruler_samples: int = 3
    ruler_lengths: tuple[int, ...] | None = None
    seed: int = 0

    def setting(self) -> dict[str, Any]:
        """The request as results.json keeps it (``eval_windows`` under the key results have
        always had, ``windows``; without RULER tasks, none of the RULER keys, as in results
        written before them)."""
        fields = asdict(self)
        if not self.tasks:
            for key in RULER_KEYS:
                del fields[key]
        return encode({SETTING_KEYS.get(key, key): value for key, value in fields.items()})


#: ``--preset``: a default that finishes on a 2-core CPU, and the full grid for a GPU (every
#: method, DroPE included: its recalibration, 200 steps of 4 windows of the original length
#: at lr 1e-4 by default, runs once before its first unit; ``recalibration_notes``)
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": {"tasks": CPU_TASKS},
    "gpu": {"methods": ("all", "drope"), "original": None, "multiples": (1.0, 2.0, 3.0),
            "depths": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), "needles": 5,
            "passkey_trials": 5, "eval_windows": 4, "tasks": tuple(FAMILIES),
            "ruler_samples": 5, "ruler_lengths": RULER_LENGTHS},
}


def preset_request(name: str, **overrides: Any) -> ArenaRequest:
    """The request of preset ``name`` with ``overrides`` (None values are left out)."""
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    return ArenaRequest(**{**PRESETS[name], **given})


@dataclass(frozen=True)
class ArenaRuntime:
    """How to run (not compared on resume)."""

    device: str = "cpu"
    gguf_cache: str | Path | None = None
    threads: int | None = None
    memory_limit: int | None = None
    #: run the cells on this Ray cluster (:mod:`posenc.study.ray_units`); None: here
    cluster: RayCluster | None = None
