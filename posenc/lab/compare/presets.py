"""What ``posenc compare`` trains and measures: a typed configuration and its named presets.

A :class:`CompareConfig` holds the :class:`~posenc.train.config.TrainConfig` every run shares
(its ``model`` an :class:`~posenc.models.lm.LMConfig`); each encoding's run derives from it
with :func:`dataclasses.replace` (:meth:`CompareConfig.train_config`).

- ``default``: a CPU run for a laptop (:data:`PRESET_MINUTES` has its measured wall time):
  every registered
  encoding (an encoding registered later joins without an edit here), a tiny model (width
  64, 2 layers, 2 heads) trained for 400 steps at length 64 on the byte-level
  standard-library corpus, evaluated at 64..512 (L..8L) with
  RoPE's inference-time scalings, one seed (noise estimated by bootstrap over windows).
- ``seeds3``: the default with three seeds per encoding, the run to draw conclusions from
  (verdicts decided against the seed-to-seed spread).
- ``paper``: for a GPU, the ALiBi paper's WikiText-103 setting as far as offline data
  allows (:data:`PAPER_SHAPE`): its model shape, training length, tokens per update and
  epochs, its four encodings, on Shakespeare's works; evaluated at 512..8192 (L..16L).
- ``smoke``: two encodings and a few steps, for checking the pipeline in seconds.
- ``corpora``: seeds3 run on each corpus of :data:`CORPUS_STUDIES` (code and prose), each in
  its own folder ``OUT/<corpus>``, with a report across corpora (:mod:`posenc.lab.compare.corpora`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ...data.shakespeare import SHAKESPEARE
from ...encodings import encoding_options, list_encodings
from ...encodings.checks import (
    require_distinct,
    require_int_at_least,
    require_positive_int,
    require_seed,
)
from ...errors import UserError
from ...eval.inference_scaling import InferenceScaling
from ...models.lm import LMConfig
from ...train.config import TrainConfig
from ..runs.variants import (
    VARIANTS,
    attn_form,
    base_encoding,
    is_variant,
    lab_run_names,
    variant_plan,
    variant_scaffold,
)
from .base_train import BASE_TRAIN, migrate_config

#: the most seeds one study runs per setting: a larger count is a typo, not a study
MAX_SEEDS = 1000


def require_seed_count(option: str, count: Any) -> None:
    """UserError unless ``count`` is an integer in [1, MAX_SEEDS]."""
    require_positive_int(option, count)
    if count > MAX_SEEDS:
        raise UserError(f"{option} must be at most {MAX_SEEDS} (MAX_SEEDS), got {count}")

#: RoPE inference-time scalings evaluated by default (each on the trained RoPE weights): the
#: frequency scalings and log-n, then the region methods that remap positions in attention
DEFAULT_SCALINGS = ("linear:4", "ntk:4", "dynamic", "yarn:4", "logn", "self_extend:4",
                    "rerope", "leaky_rerope:4", "dual_chunk", "streaming")
#: encoding options every preset uses unless told otherwise (see also
#: :meth:`CompareConfig.options_for`, which adds those that depend on the model's size)
DEFAULT_PE_OPTIONS: dict[str, dict[str, Any]] = {}
#: evaluation lengths are train_len times these unless given explicitly
LENGTH_MULTIPLIERS = (1, 2, 4, 8, 16)
#: LMConfig fields a run sets itself (so they are not options of a comparison)
PER_RUN_MODEL_FIELDS = ("pe", "pe_options", "vocab_size", "max_len", "plan", "attn_form")


@dataclass(frozen=True)
class CompareConfig:
    """Everything that defines a comparison; two runs with equal configs are comparable.

    Training (the same for every encoding): ``train``, a TrainConfig whose ``model`` gives
    the model shape (``model.max_len`` is the training length); ``seeds`` runs per encoding
    with seeds ``train.seed``, ``train.seed + 1``, ... (each sets data order and
    initialisation). ``train.device`` is where the runs train and are evaluated. ``encodings``
    empty means every registered encoding. Evaluation: ``lengths`` (empty: train_len x
    ``length_multipliers``), ``eval_tokens`` (tokens scored per length, from the start of the
    test split), ``stride`` (None: non-overlapping windows), ``scalings`` (RoPE
    inference-time scalings), entropy at lengths up to ``entropy_max_len`` (0: off) on
    ``entropy_windows`` windows, ``timing_rounds`` interleaved rounds of training-step timing
    (0: off). ``pe_options`` maps an encoding to its options (used when it is among
    ``encodings``). :meth:`with_options` replaces fields by their short names (``steps``,
    ``d_model``) or dotted ones (``train.lr``, ``model.n_heads``).
    """

    preset: str = "default"
    encodings: tuple[str, ...] = ()         # empty: every registered encoding
    seeds: int = 1
    train: TrainConfig = BASE_TRAIN
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
        unknown = [e for e in self.encodings if e not in lab_run_names()]
        if unknown:
            raise UserError(f"unknown encoding(s) {', '.join(unknown)}; valid encodings: "
                             f"{', '.join(list_encodings())}; lab variants: "
                             f"{', '.join(VARIANTS)}")
        require_distinct("encodings", self.encodings)
        if not isinstance(self.train, TrainConfig):
            raise UserError(f"train must be a TrainConfig, got {type(self.train).__name__}")
        if self.train.task is not None or self.train.pack:
            raise UserError("a comparison trains on text windows: train.task must be None "
                             "and train.pack false")
        if self.model.max_len != self.train.train_len:
            raise UserError(f"model.max_len={self.model.max_len} must equal train_len="
                             f"{self.train.train_len} (set train_len to change both)")
        for name in self.encodings:
            if is_variant(name):
                variant_plan(name, self.model.n_layers)          # raises if too shallow
        for name in ("eval_tokens", "entropy_windows"):
            require_positive_int(name, getattr(self, name))
        require_seed("the last seed (seed + seeds - 1)", self.train.seed + self.seeds - 1)
        require_seed_count("seeds", self.seeds)
        require_int_at_least("timing_rounds", self.timing_rounds, 0)
        if not self.length_multipliers or any(
                isinstance(m, bool) or not isinstance(m, int) or m < 1
                for m in self.length_multipliers):
            raise UserError("length_multipliers must be integers >= 1, got "
                             f"{list(self.length_multipliers)}")
        require_int_at_least("entropy_max_len", self.entropy_max_len, 0)
        for length in self.lengths:
            require_int_at_least("lengths", length, 2)
        require_distinct("lengths", self.lengths)
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
        if None in labels:
            raise UserError(f"scalings must be non-empty specs, got {list(self.scalings)}")
        require_distinct("scalings", labels)

    @property
    def model(self) -> LMConfig:
        """The model shape every run shares (``pe`` and its options are set per run)."""
        return self.train.model

    @property
    def train_len(self) -> int:
        return self.train.train_len

    @property
    def eval_lengths(self) -> tuple[int, ...]:
        """Evaluation lengths, sorted: ``lengths`` or train_len x ``length_multipliers``."""
        if self.lengths:
            return tuple(sorted(self.lengths))
        return tuple(sorted({self.train_len * m for m in self.length_multipliers}))

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds every encoding is trained with."""
        return tuple(range(self.train.seed, self.train.seed + self.seeds))

    @property
    def entropy_lengths(self) -> tuple[int, ...]:
        return tuple(n for n in self.eval_lengths if n <= self.entropy_max_len)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples as lists, ``train`` nested) with the resolved evaluation
        lengths."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = (value.to_dict() if f.name == "train" else list(value)
                           if isinstance(value, tuple) else copy.deepcopy(value))
        out["lengths"] = list(self.eval_lengths)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompareConfig:
        """The config of a :meth:`to_dict` dict (a flat one of older versions is migrated:
        :func:`posenc.lab.compare.base_train.migrate_config`)."""
        data = migrate_config(data)
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - valid)
        if unknown:
            raise UserError(f"unknown compare config key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        if "train" in values:
            values["train"] = TrainConfig.from_dict(values["train"])
        return cls(**values)

    def with_options(self, **changes: Any) -> CompareConfig:
        """A copy with options replaced; None values are ignored. A name is a field of the
        comparison (``encodings``, ``seeds``, ...), of its TrainConfig (``steps``, ``lr``,
        ``train_len``, which also sets ``model.max_len``) or of its model (``d_model``), or
        dotted: ``train.<field>``, ``model.<field>``."""
        ours, train, model = {}, {}, {}
        train_fields = {f.name for f in fields(TrainConfig)} - {"model", "task", "pack"}
        model_fields = {f.name for f in fields(LMConfig)} - set(PER_RUN_MODEL_FIELDS)
        study_fields = {f.name for f in fields(self)} - {"train"}
        unknown = []
        for name, value in changes.items():
            if value is None:
                continue
            scope, dot, short = name.rpartition(".")
            if not dot and short in study_fields:
                ours[short] = tuple(value) if isinstance(value, list) else value
            elif scope in ("", "train") and short in train_fields:
                train[short] = tuple(value) if isinstance(value, list) else value
            elif scope in ("", "model", "train.model") and short in model_fields:
                model[short] = value
            else:
                unknown.append(name)
        if unknown:
            valid = sorted(study_fields | train_fields | model_fields)
            raise UserError(f"unknown compare option(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(valid)}")
        if "train_len" in train:
            model["max_len"] = train["train_len"]
        new_train = replace(self.train, model=replace(self.model, **model), **train)
        return replace(self, train=new_train, **ours)

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
        from ...models.blocks import embedding_init_std
        if is_variant(encoding):             # the base encoding's options, then the variant's
            return {**self.options_for(base_encoding(encoding)),
                    **VARIANTS[encoding].pe_options}
        options = dict(self.pe_options.get(encoding, {}))
        if encoding == "sinusoidal":
            options.setdefault("scale", round(embedding_init_std(self.model.d_model), 6))
        if encoding == "t5" and self.train_len < 128:      # > max_exact for any bucket count
            options.setdefault("max_distance", max(self.train_len,
                                                   int(options.get("num_buckets", 32))))
        return options

    def train_config(self, encoding: str, vocab_size: int, seed: int | None = None
                     ) -> TrainConfig:
        """The TrainConfig of one encoding and seed: ``train`` with the model's ``pe``, its
        options and ``vocab_size`` set, and a checkpoint every quarter of the steps."""
        options = self.options_for(encoding)
        pe = base_encoding(encoding)
        declared = encoding_options(pe)
        if "vocab_size" in declared and declared["vocab_size"] is None:   # token-id tables
            options.setdefault("vocab_size", vocab_size)
        plan = variant_plan(encoding, self.model.n_layers) if is_variant(encoding) else None
        model = replace(self.model, vocab_size=vocab_size, pe=pe, pe_options=options,
                        plan=plan, attn_form=attn_form(encoding))
        return replace(self.train, model=model, seed=self.train.seed if seed is None else seed,
                       checkpoint_every=max(1, self.train.steps // 4),
                       **variant_scaffold(encoding, self.train.steps))


#: the default preset's budget (one seed): every model clearly beats the unigram baseline
#: and all encodings with RoPE's scalings fit in about 7 minutes on a quiet 2-core CPU. At
#: equal cost, width 64 for 400 steps learns more than width 128 for 170 (measured: RoPE
#: ppl 7.1 vs 9.0, T5 8.9 vs 10.3, NoPE 9.4 vs 11.3 at L; unigram 21.3).
#: The ALiBi paper's WikiText-103 runs, mirrored. Press, Smith and Lewis (2022) train
#: fairseq's ``transformer_lm_wiki103`` on 512-token inputs with 9216 tokens per update for
#: 286,000 updates (the training command in the README of their code release,
#: github.com/ofirpress/attention_with_linear_biases): 16 layers of width 1024, 8 heads, a
#: feed-forward width of 4096 and dropout 0.3 (fairseq's definition of that architecture), about
#: 25 epochs of WikiText-103's 103 M training tokens; their appendix Table 2 compares
#: sinusoidal, rotary, T5 bias and ALiBi at L = 512. Here the same shape, encodings and
#: epochs on the largest English corpus posenc has offline, Shakespeare's works
#: (:mod:`posenc.data.shakespeare`: 1.40 M training tokens with BPE-8192, about 74x fewer):
#: :data:`PAPER_STEPS` updates of 18 x 512 tokens. What differs: AdamW (theirs: Nesterov SGD
#: with a cosine schedule), BPE-8192 (theirs: a 267K-word vocabulary with adaptive input),
#: bf16 autocast, and a corpus so small that the model can memorise more of it.
ALIBI_PAPER_ENCODINGS = ("sinusoidal", "rope", "t5", "alibi")
PAPER_SHAPE = {"d_model": 1024, "n_layers": 16, "n_heads": 8, "d_ff": 4096, "dropout": 0.3,
               "train_len": 512, "batch_size": 18}
#: about 25.7 epochs of Shakespeare's 1,398,828 BPE-8192 training tokens, as the paper's
#: 286,000 updates of 9216 tokens are about 25.5 epochs of WikiText-103
PAPER_STEPS = 3900

_DEFAULT = CompareConfig(length_multipliers=(1, 2, 4, 8), eval_tokens=16384,
                         entropy_max_len=256, entropy_windows=1
                         ).with_options(steps=400, d_model=64, n_heads=2)

PRESETS: dict[str, CompareConfig] = {
    "default": _DEFAULT,
    "seeds3": replace(_DEFAULT, preset="seeds3", seeds=3),
    "paper": CompareConfig(
        preset="paper", encodings=ALIBI_PAPER_ENCODINGS, eval_tokens=131072, entropy_max_len=2048,
        entropy_windows=4,
    ).with_options(**PAPER_SHAPE, data=SHAKESPEARE, steps=PAPER_STEPS, lr=3e-4,
                   warmup_steps=220, tokenizer="bpe:8192", bf16=True),
    "corpora": replace(_DEFAULT, preset="corpora", seeds=3),
    "smoke": CompareConfig(
        preset="smoke", encodings=("rope", "alibi"), eval_tokens=512, entropy_max_len=64,
        entropy_windows=1,
    ).with_options(train_len=16, steps=20, batch_size=8, lr=3e-3, d_model=32, n_layers=1,
                   n_heads=2),
}


#: what each preset is for, and its wall time measured on the 2-core CPU machine from an
#: empty output directory (minutes; None: not measured here). The README's preset table and
#: ``posenc compare --help`` quote these.
PRESET_PURPOSE = {"default": "every encoding, one seed",
                  "seeds3": "the default with 3 seeds (draw conclusions from this one)",
                  "paper": "the ALiBi paper's shape on Shakespeare, for a GPU",
                  "corpora": "seeds3 on code and on prose, claims compared across corpora",
                  "smoke": "two encodings, a few steps"}
#: (seeds3: the default run alone, 5.7 min, plus growing it to three seeds beside the test
#: suite, 13.2 min: an upper bound; corpora: timed before the four newest runs joined)
PRESET_MINUTES: dict[str, float | None] = {"default": 5.7, "seeds3": 18.9, "paper": None,
                                           "corpora": 18.2, "smoke": 0.2}
#: presets that run one comparison per corpus (names as ``posenc compare --corpus`` takes
#: them), each in its own folder under OUT
CORPUS_STUDIES: dict[str, tuple[str, ...]] = {"corpora": ("code", "prose")}


def took_phrase(minutes: float | None) -> str:
    """How ``--help`` states a measured wall time in minutes (None: not measured)."""
    if minutes is None:
        return "not timed on a CPU"
    return (f"about {round(minutes * 60)} s" if minutes < 1 else f"about {minutes:g} min"
            ) + " on a 2-core CPU"


def preset_help() -> str:
    """One line per preset for ``--help``: its purpose and measured wall time."""
    return "; ".join(f"{name}: {PRESET_PURPOSE[name]}, {took_phrase(PRESET_MINUTES.get(name))}"
                     for name in PRESETS)


def length_help(name: str = "default") -> str:
    """The evaluation lengths of preset ``name`` as multiples of L (``"L,2L,4L,8L"``)."""
    return ",".join("L" if m == 1 else f"{m}L" for m in PRESETS[name].length_multipliers)


#: presets that train every registered encoding (resolved when the preset is used)
CATALOGUE_PRESETS = ("default", "seeds3", "corpora")


def preset(name: str, **overrides: Any) -> CompareConfig:
    """The preset ``name`` with some options replaced (None values are ignored; names as
    :meth:`CompareConfig.with_options` takes them)."""
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    if name in CATALOGUE_PRESETS and overrides.get("encodings") is None:
        overrides["encodings"] = tuple(lab_run_names())
    return PRESETS[name].with_options(**overrides)


#: settings that say where or how fast a comparison ran, not what it measured
NOT_SETTINGS = ("device", "cache_dir", "preset")


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and key in ("train", "model"):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changed_from_preset(config: dict[str, Any]) -> list[str] | None:
    """Short names of the settings that differ from the preset the config names (``data``,
    ``steps``, ``encodings``), in order; None when the preset is unknown."""
    try:
        base = _flat(preset(config.get("preset") or "default").to_dict())
    except UserError:
        return None
    ran = _flat(config)
    names = []
    for key, value in ran.items():
        short = key.rsplit(".", 1)[-1]
        if short in NOT_SETTINGS or key not in base:
            continue
        if base[key] != value and short not in names:
            names.append(short)
    return names
