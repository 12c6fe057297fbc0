"""What ``posenc compare`` trains and measures: a typed configuration and its named presets.

- ``default``: a CPU run for a laptop (about 7 minutes on 2 cores): every registered
  encoding (an encoding registered later joins without an edit here), a tiny model (width
  64, 2 layers, 2 heads) trained for 400 steps at length 64 on the byte-level
  standard-library corpus, evaluated at 64..512 (L..8L) with
  RoPE's inference-time scalings, one seed (noise estimated by bootstrap over windows).
- ``seeds3``: the default with three seeds per encoding, the run to draw conclusions from
  (verdicts decided against the seed-to-seed spread).
- ``paper``: a larger configuration meant for a GPU, in the spirit of the ALiBi paper's
  WikiText-103 runs (train at 512 tokens, test up to 16x = 8192): 8 layers of width 512,
  BPE with 8192 ids, bf16 autocast, 5000 steps of 32 x 512 tokens (the standard library's
  ~3 M BPE tokens are seen many times over: pass ``--data`` for a larger corpus).
- ``smoke``: two encodings and a few steps, for checking the pipeline in seconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..errors import UserError
from ..encodings import list_encodings
from ..encodings.checks import require_int_at_least, require_positive_int
from ..eval.inference_scaling import InferenceScaling

#: RoPE inference-time scalings evaluated by default (each on the trained RoPE weights)
DEFAULT_SCALINGS = ("linear:4", "ntk:4", "dynamic", "yarn:4", "logn")
#: encoding options every preset uses unless told otherwise (see also
#: :meth:`CompareConfig.options_for`, which adds those that depend on the model's size)
DEFAULT_PE_OPTIONS: dict[str, dict[str, Any]] = {}
#: evaluation lengths are train_len times these unless given explicitly
LENGTH_MULTIPLIERS = (1, 2, 4, 8, 16)
#: settings a comparison may grow in without its old runs becoming incomparable
GROWABLE = ("preset", "encodings", "seeds", "scalings", "timing_rounds", "pe_options")


@dataclass(frozen=True)
class CompareConfig:
    """Everything that defines a comparison; two runs with equal configs are comparable.

    Training (the same for every encoding): ``train_len``, ``steps``, ``batch_size``,
    ``lr``, ``warmup_steps``, ``weight_decay``, ``grad_clip``, ``bf16`` and the model
    shape ``d_model``, ``n_layers``, ``n_heads``; ``seeds`` runs per encoding with seeds
    ``seed``, ``seed + 1``, ... (each sets data order and initialisation). ``encodings``
    empty means every registered encoding. Data: ``data`` (None: the standard library
    source) and ``tokenizer``. Evaluation: ``lengths`` (empty: train_len x
    ``length_multipliers``), ``eval_tokens`` (tokens scored per length, from the start of the
    test split), ``stride`` (None: non-overlapping windows), ``scalings`` (RoPE
    inference-time scalings), entropy at lengths up to ``entropy_max_len`` (0: off) on
    ``entropy_windows`` windows, ``timing_rounds`` interleaved rounds of training-step timing
    (0: off). ``pe_options`` maps an encoding to its options (used when it is among
    ``encodings``).
    """

    preset: str = "default"
    encodings: tuple[str, ...] = ()         # empty: every registered encoding
    train_len: int = 64
    steps: int = 600
    batch_size: int = 32
    lr: float = 2e-3
    warmup_steps: int | None = None         # None: steps // 10
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    seeds: int = 1
    bf16: bool = False
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    data: str | None = None
    tokenizer: str = "byte"
    lengths: tuple[int, ...] = ()
    length_multipliers: tuple[int, ...] = LENGTH_MULTIPLIERS
    eval_tokens: int = 32768
    stride: int | None = None
    scalings: tuple[str, ...] = DEFAULT_SCALINGS
    entropy_max_len: int = 1024
    entropy_windows: int = 2
    timing_rounds: int = 5
    pe_options: dict[str, dict[str, Any]] = field(
        default_factory=lambda: dict(DEFAULT_PE_OPTIONS))

    def __post_init__(self) -> None:
        if not self.encodings:
            object.__setattr__(self, "encodings", tuple(list_encodings()))
        unknown = [e for e in self.encodings if e not in list_encodings()]
        if unknown:
            raise UserError(f"unknown encoding(s) {', '.join(unknown)}; valid encodings: "
                             f"{', '.join(list_encodings())}")
        if len(set(self.encodings)) != len(self.encodings):
            raise UserError(f"encodings are listed twice: {', '.join(self.encodings)}")
        for name in ("train_len", "steps", "batch_size", "d_model", "n_layers", "n_heads",
                     "eval_tokens", "entropy_windows", "seeds"):
            require_positive_int(name, getattr(self, name))
        require_int_at_least("seed", self.seed, 0)
        require_int_at_least("timing_rounds", self.timing_rounds, 0)
        if not self.length_multipliers or any(
                isinstance(m, bool) or not isinstance(m, int) or m < 1
                for m in self.length_multipliers):
            raise UserError("length_multipliers must be integers >= 1, got "
                             f"{list(self.length_multipliers)}")
        require_int_at_least("train_len", self.train_len, 2)
        require_int_at_least("entropy_max_len", self.entropy_max_len, 0)
        if self.warmup_steps is not None:
            require_int_at_least("warmup_steps", self.warmup_steps, 0)
            if self.warmup_steps >= self.steps:
                raise UserError(f"warmup_steps must be < steps={self.steps}, got "
                                 f"{self.warmup_steps}")
        if self.d_model % self.n_heads:
            raise UserError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")
        for name in ("lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0 or (name == "lr" and value == 0):
                raise UserError(f"{name} must be a finite number "
                                 f"{'> 0' if name == 'lr' else '>= 0'}, got {value!r}")
        for length in self.lengths:
            require_int_at_least("lengths", length, 2)
        if self.lengths and len(set(self.lengths)) != len(self.lengths):
            raise UserError(f"lengths are listed twice: {list(self.lengths)}")
        if self.stride is not None:
            require_positive_int("stride", self.stride)
            if self.stride >= min(self.eval_lengths):
                raise UserError(f"stride must be in [1, shortest length - 1 = "
                                 f"{min(self.eval_lengths) - 1}], got {self.stride}")
        if not isinstance(self.pe_options, dict) or not all(
                isinstance(v, dict) for v in self.pe_options.values()):
            raise UserError("pe_options must map encoding names to option dicts, got "
                             f"{self.pe_options!r}")
        unknown = [e for e in self.pe_options if e not in list_encodings()]
        if unknown:
            raise UserError(f"pe_options for unknown encoding(s) {', '.join(unknown)}; "
                             f"valid encodings: {', '.join(list_encodings())}")
        labels = [InferenceScaling.parse(s).label for s in self.scalings]   # raises if bad
        if None in labels or len(set(labels)) != len(labels):
            raise UserError(f"scalings must be distinct non-empty specs, got "
                             f"{list(self.scalings)}")

    @property
    def eval_lengths(self) -> tuple[int, ...]:
        """Evaluation lengths, sorted: ``lengths`` or train_len x ``length_multipliers``."""
        if self.lengths:
            return tuple(sorted(self.lengths))
        return tuple(sorted({self.train_len * m for m in self.length_multipliers}))

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds every encoding is trained with."""
        return tuple(range(self.seed, self.seed + self.seeds))

    @property
    def entropy_lengths(self) -> tuple[int, ...]:
        return tuple(n for n in self.eval_lengths if n <= self.entropy_max_len)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples as lists) with the resolved evaluation lengths."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        out["lengths"] = list(self.eval_lengths)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompareConfig:
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - valid)
        if unknown:
            raise UserError(f"unknown compare config key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    def options_for(self, encoding: str) -> dict[str, Any]:
        """The options ``encoding`` is trained with in this comparison: ``pe_options``, plus
        two defaults that follow the model's size unless given.

        - sinusoidal ``scale`` = the token embeddings' init std (1 / sqrt(d_model)): at
          scale 1 (entries of RMS 0.7) the fixed table swamps the tokens of a model without
          sqrt(d) embedding scaling and trains far worse within its own length;
        - t5 ``max_distance`` = the training length when that is below T5's 128: Raffel et
          al. (2020) train at 512 with buckets up to 128, so every bucket, the clipped last
          one included, is trained; at L = 64 the buckets past 64 would stay at their
          initial values and decide the model's behaviour past L (BENCHMARKS.md).
        """
        from ..models.blocks import embedding_init_std
        options = dict(self.pe_options.get(encoding, {}))
        if encoding == "sinusoidal":
            options.setdefault("scale", round(embedding_init_std(self.d_model), 6))
        if encoding == "t5" and self.train_len < 128:      # > max_exact for any bucket count
            options.setdefault("max_distance", max(self.train_len,
                                                   int(options.get("num_buckets", 32))))
        return options


#: the default preset's budget (one seed): every model clearly beats the unigram baseline
#: and all encodings with RoPE's scalings fit in about 7 minutes on a quiet 2-core CPU. At
#: equal cost, width 64 for 400 steps learns more than width 128 for 170 (measured: RoPE
#: ppl 7.1 vs 9.0, T5 8.9 vs 10.3, NoPE 9.4 vs 11.3 at L; unigram 21.3).
_DEFAULT = CompareConfig(steps=400, d_model=64, n_heads=2, length_multipliers=(1, 2, 4, 8),
                         eval_tokens=16384, entropy_max_len=256, entropy_windows=1)

PRESETS: dict[str, CompareConfig] = {
    "default": _DEFAULT,
    "seeds3": replace(_DEFAULT, preset="seeds3", seeds=3),
    "paper": CompareConfig(
        preset="paper", train_len=512, steps=5000, batch_size=32, lr=6e-4, d_model=512,
        n_layers=8, n_heads=8, tokenizer="bpe:8192", bf16=True, eval_tokens=131072,
        entropy_max_len=2048, entropy_windows=4),
    "smoke": CompareConfig(
        preset="smoke", encodings=("rope", "alibi"), train_len=16, steps=20, batch_size=8,
        lr=3e-3, d_model=32, n_layers=1, n_heads=2, eval_tokens=512,
        entropy_max_len=64, entropy_windows=1),
}


#: presets that train every registered encoding (resolved when the preset is used)
CATALOGUE_PRESETS = ("default", "seeds3", "paper")


def preset(name: str, **overrides: Any) -> CompareConfig:
    """The preset ``name`` with some fields replaced (None values are ignored)."""
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    changes = {k: v for k, v in overrides.items() if v is not None}
    if name in CATALOGUE_PRESETS:
        changes.setdefault("encodings", tuple(list_encodings()))
    valid = {f.name for f in fields(CompareConfig)}
    unknown = sorted(set(changes) - valid)
    if unknown:
        raise UserError(f"unknown compare option(s) {', '.join(unknown)}")
    return replace(PRESETS[name], **changes)


# ------------------------------------------------------------------ growing a comparison
def incomparable_reason(old: dict[str, Any], new: CompareConfig) -> str | None:
    """Why runs made under the config dict ``old`` cannot sit beside runs of ``new`` (one
    line), or None when ``new`` only adds encodings, seeds, scalings or timing rounds."""
    ours = new.to_dict()
    for key in sorted(set(old) | set(ours)):
        if key not in GROWABLE and old.get(key) != ours.get(key):
            return f"{key} is {old.get(key, 'unset')!r} there but {ours.get(key)!r} now"
    theirs_opts, our_opts = old.get("pe_options") or {}, ours.get("pe_options") or {}
    for enc in set(old.get("encodings") or ()) & set(new.encodings):
        if theirs_opts.get(enc, {}) != our_opts.get(enc, {}):
            return (f"options of {enc} are {theirs_opts.get(enc, {})} there but "
                    f"{our_opts.get(enc, {})} now")
    return None


def merged(old: dict[str, Any], new: CompareConfig) -> CompareConfig:
    """The config of a comparison grown from ``old`` by ``new``: the union of encodings and
    scalings (old ones first), the larger number of seeds. Assumes they are comparable."""
    encodings = list(old.get("encodings") or ())
    encodings += [e for e in new.encodings if e not in encodings]
    scalings = list(old.get("scalings") or ())
    scalings += [s for s in new.scalings if s not in scalings]
    options = {**(old.get("pe_options") or {}), **new.pe_options}
    return replace(new, encodings=tuple(encodings), scalings=tuple(scalings),
                   seeds=max(int(old.get("seeds", 1)), new.seeds), pe_options=options)
