"""What the synthetic-task study trains and measures: a typed configuration and its presets.

Two parts share one configuration. Decoder-only :class:`~posenc.models.lm.TransformerLM`
models learn each of ``lm_tasks`` (:mod:`posenc.data.synthetic`: copy, recall, ...) on
lengths up to ``train_len`` and are scored by exact match at ``train_len`` x
``length_multipliers``; encoder-decoder :class:`~posenc.models.seq2seq.Seq2SeqTransformer`
models learn ``seq2seq_task`` (reverse or sort) by teacher forcing on sources up to
``seq2seq_len`` letters and are scored by greedy decoding on longer sources. Each encoding
is trained once per seed; the seed sets the initialisation and the data order.

``encodings`` and ``seeds`` say which runs make up the study; every other field is the
setting all runs share (two studies are comparable when those fields are equal).

- ``tasks``: the CPU preset, 3 seeds (its measured wall time is in the README).
- ``tasks-cope``: CoPE against RoPE and NoPE on selective copy (Golovneva et al. 2024): 4
  letters among blanks, trained up to L = 16 and tested on sparser inputs up to 8L, 2,000
  steps, decoder-only.
- ``tasks-state``: state tracking on the flip-flop language (Liu et al., NeurIPS 2023):
  RoPE, NoPE, ALiBi, stick-breaking attention (a lab variant) and PaTH trained on FFL(p_i = 0.8)
  strings of up to L = 32 tokens and tested on strings up to 8L, 3 seeds, a few minutes on a
  CPU (:data:`STATE_SHAPE`).
- ``tasks-paper``: for a GPU, Kazemnejad et al.'s setting as far as posenc's tasks allow
  (:data:`KAZEMNEJAD_SHAPE`): their five encodings, decoder-only, copy, reverse and addition
  with inputs of up to 20 letters in training and up to twice that in testing, a T5-base-sized
  decoder and their training budget.
- ``tasks-smoke``: a few steps of everything, for checking the pipeline in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ...data.synthetic import SEQ2SEQ_TASKS, TASKS, min_length
from ...encodings import list_encodings
from ...encodings.checks import require_distinct, require_positive_int, require_seed
from ...errors import UserError
from ...models.lm import LMConfig
from ...train.task_loop import TaskTrainConfig
from ..compare.presets import require_seed_count, took_phrase
from ..runs.variants import (
    VARIANTS,
    attn_form,
    base_encoding,
    is_variant,
    lab_run_names,
    variant_plan,
)

#: encodings of the decoder-only part: those Kazemnejad et al. (2023) compare (NoPE, T5's
#: bias, ALiBi, RoPE and an absolute encoding: sinusoidal, which runs past its training
#: length where a learned table cannot)
KAZEMNEJAD_ENCODINGS = ("nope", "t5", "alibi", "rope", "sinusoidal")
#: options every run uses for these encodings (see :meth:`TaskStudyConfig.options_for`)
PE_OPTIONS: dict[str, dict[str, Any]] = {}
#: fields that select runs rather than change them
GRID_FIELDS = ("encodings", "seq2seq_encodings", "seeds")
#: the decoder-only model every LM run shares (``pe`` and its options are set per run)
BASE_MODEL = LMConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, max_len=8)
#: short option names (flat fields of older configs) -> where they live in the nested form
OPTION_PATHS = {"train_len": ("train.max_len", "model.max_len"), "steps": ("train.steps",),
                "batch_size": ("train.batch_size", "seq2seq_train.batch_size"),
                "lr": ("train.lr",), "d_model": ("model.d_model",),
                "n_layers": ("model.n_layers",), "n_heads": ("model.n_heads",),
                "seq2seq_len": ("seq2seq_train.max_len",),
                "seq2seq_min_len": ("seq2seq_train.min_len",),
                "seq2seq_steps": ("seq2seq_train.steps",), "seq2seq_lr": ("seq2seq_train.lr",)}
NESTED = ("model", "train", "seq2seq_train")


@dataclass(frozen=True)
class TaskStudyConfig:
    """Everything that defines a task study (see the module docstring).

    ``model``: the decoder-only models' shape (``max_len`` = the training length L); the
    encoder-decoder models have its width and heads and ``seq2seq_layers`` layers each side.
    ``encodings`` (decoder-only) may also name lab variants (``stick_breaking``, ...:
    :mod:`posenc.lab.runs.variants`); ``seq2seq_encodings`` name encodings.
    ``train`` / ``seq2seq_train``: the two parts' budget and optimizer; ``train.max_len`` is
    L, ``train.min_len`` is replaced per task by ``min_train_len`` (None: the task's own
    shortest length), and ``seed`` by each run's seed.
    """

    preset: str = "tasks"
    encodings: tuple[str, ...] = KAZEMNEJAD_ENCODINGS
    seq2seq_encodings: tuple[str, ...] = ("sinusoidal", "rope", "t5", "alibi")
    seeds: tuple[int, ...] = (0, 1, 2)
    lm_tasks: tuple[str, ...] = ("copy",)
    min_train_len: int | None = None        # None: the task's shortest length
    length_multipliers: tuple[float, ...] = (1, 1.5, 2, 3, 4, 6, 8)
    model: LMConfig = BASE_MODEL
    train: TaskTrainConfig = TaskTrainConfig(steps=2000, batch_size=32, min_len=1, max_len=8,
                                             lr=3e-3)
    seq2seq_task: str | None = "reverse"
    seq2seq_layers: int = 1
    seq2seq_train: TaskTrainConfig = TaskTrainConfig(steps=1500, batch_size=32, min_len=4,
                                                     max_len=8, lr=5e-3)
    eval_examples: int = 200
    eval_seed: int = 1_000_003

    def __post_init__(self) -> None:
        for name, valid in (("encodings", lab_run_names()),
                            ("seq2seq_encodings", list_encodings())):
            names = getattr(self, name)
            unknown = [e for e in names if e not in valid]
            if unknown:
                variants = f"; lab variants: {', '.join(VARIANTS)}" if name == "encodings" \
                    else ""
                raise UserError(f"unknown encoding(s) {', '.join(unknown)}; valid encodings: "
                                 f"{', '.join(list_encodings())}{variants}")
            require_distinct(name, names)
        require_seed_count("the number of seeds", len(self.seeds) or 1)
        if not self.seeds:
            raise UserError("seeds must list at least one integer >= 0")
        require_distinct("seeds", self.seeds)
        for seed in self.seeds:
            require_seed("seeds", seed)
        unknown = [t for t in self.lm_tasks if t not in TASKS]
        if unknown:
            raise UserError(f"unknown task(s) {', '.join(unknown)}; valid tasks: "
                             f"{', '.join(TASKS)}")
        if self.seq2seq_task is not None and self.seq2seq_task not in SEQ2SEQ_TASKS:
            raise UserError(f"unknown sequence-to-sequence task {self.seq2seq_task!r}; "
                             f"valid: {', '.join(SEQ2SEQ_TASKS)}")
        for name, cls in (("model", LMConfig), ("train", TaskTrainConfig),
                          ("seq2seq_train", TaskTrainConfig)):
            if not isinstance(getattr(self, name), cls):
                raise UserError(f"{name} must be a {cls.__name__}, got "
                                 f"{type(getattr(self, name)).__name__}")
        for name in ("seq2seq_layers", "eval_examples"):
            require_positive_int(name, getattr(self, name))
        require_seed("eval_seed", self.eval_seed)
        if self.model.max_len != self.train_len:
            raise UserError(f"model.max_len={self.model.max_len} must equal train.max_len="
                             f"{self.train_len} (set train_len to change both)")
        for task in self.lm_tasks:
            lo = self.min_len_for(task)
            if not min_length(task) <= lo <= self.train_len:
                raise UserError(f"task {task!r} needs min_train_len >= {min_length(task)} "
                                 f"and <= train_len={self.train_len}, got {lo}")
        if not self.length_multipliers or min(self.length_multipliers) != 1 \
                or any(m < 1 for m in self.length_multipliers):
            raise UserError("length_multipliers must start at 1 and be >= 1, got "
                             f"{list(self.length_multipliers)}")

    @property
    def train_len(self) -> int:
        """L of the decoder-only part: ``train.max_len``."""
        return self.train.max_len

    @property
    def seq2seq_len(self) -> int:
        """The encoder-decoder part's longest training source: ``seq2seq_train.max_len``."""
        return self.seq2seq_train.max_len

    def min_len_for(self, task: str) -> int:
        """The shortest training length of ``task`` (the task's own minimum by default)."""
        return min_length(task) if self.min_train_len is None else self.min_train_len

    @staticmethod
    def _lengths(base: int, multipliers: tuple[float, ...]) -> tuple[int, ...]:
        return tuple(sorted({max(1, round(base * m)) for m in multipliers}))

    @property
    def lm_lengths(self) -> tuple[int, ...]:
        """Evaluation lengths of the decoder-only tasks: train_len x the multipliers."""
        return self._lengths(self.train_len, self.length_multipliers)

    @property
    def seq2seq_lengths(self) -> tuple[int, ...]:
        """Source lengths the encoder-decoder is tested at: seq2seq_len x the multipliers."""
        return self._lengths(self.seq2seq_len, self.length_multipliers)

    def options_for(self, encoding: str) -> dict[str, Any]:
        """The encoding's options: the sinusoidal table at the scale of the token
        embeddings (1 / sqrt(d_model)), as in the perplexity comparison."""
        from ...models.blocks import embedding_init_std
        if is_variant(encoding):             # the base encoding's options, then the variant's
            return {**self.options_for(base_encoding(encoding)),
                    **VARIANTS[encoding].pe_options}
        options = dict(PE_OPTIONS.get(encoding, {}))
        if encoding == "sinusoidal":
            options.setdefault("scale", round(embedding_init_std(self.model.d_model), 6))
        return options

    def lm_config(self, encoding: str, max_len: int) -> LMConfig:
        """The decoder-only model of ``encoding`` (an encoding or a lab variant: its base
        encoding, options, plan and attention form) trained up to ``max_len``."""
        plan = variant_plan(encoding, self.model.n_layers) if is_variant(encoding) else None
        return replace(self.model, max_len=max_len, pe=base_encoding(encoding),
                       pe_options=self.options_for(encoding), plan=plan,
                       attn_form=attn_form(encoding))

    def train_config(self, part: str, task: str, seed: int) -> TaskTrainConfig:
        """The budget and optimizer of one run: its part's, with the task's shortest length
        (decoder-only) and the run's seed."""
        if part == "lm":
            return replace(self.train, min_len=self.min_len_for(task), seed=seed)
        return replace(self.seq2seq_train, seed=seed)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples as lists; ``model``, ``train``, ``seq2seq_train``
        nested)."""
        return {f.name: getattr(self, f.name).to_dict() if f.name in NESTED else
                list(getattr(self, f.name)) if isinstance(getattr(self, f.name), tuple)
                else getattr(self, f.name) for f in fields(self)}

    def setting(self) -> dict[str, Any]:
        """The settings every run shares by dotted name (``train.lr``): equal settings make
        two studies comparable."""
        out: dict[str, Any] = {}
        for key, value in self.to_dict().items():
            if key in NESTED:
                out.update({f"{key}.{k}": v for k, v in value.items()})
            elif key not in GRID_FIELDS and key != "preset":
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskStudyConfig:
        """The config of a :meth:`to_dict` dict; a flat one written by older versions
        (``steps``, ``d_model``, ``seq2seq_len`` ... at the top) is migrated."""
        data = dict(data)
        flat = {k: data.pop(k) for k in list(data) if k in OPTION_PATHS}
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - valid)
        if unknown:
            raise UserError(f"unknown task study key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid | set(OPTION_PATHS)))}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        for key, kind in (("model", LMConfig), ("train", TaskTrainConfig),
                          ("seq2seq_train", TaskTrainConfig)):
            if isinstance(values.get(key), dict):
                values[key] = kind.from_dict(values[key])
        return cls(**values).with_options(**flat)

    def with_options(self, **changes: Any) -> TaskStudyConfig:
        """A copy with fields replaced (None values ignored): a field of the study, a short
        name of :data:`OPTION_PATHS` (``steps``, ``d_model``, ``train_len`` ...) or a dotted
        ``model.x`` / ``train.x`` / ``seq2seq_train.x``."""
        ours: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {key: {} for key in NESTED}
        for name, value in changes.items():
            if value is None:
                continue
            for path in OPTION_PATHS.get(name, (name,)):
                part, dot, field_name = path.partition(".")
                if dot and part in NESTED and field_name in {
                        f.name for f in fields(getattr(self, part))}:
                    nested[part][field_name] = tuple(value) if isinstance(value, list) \
                        else value
                elif not dot and name in {f.name for f in fields(self)} - set(NESTED):
                    ours[name] = tuple(value) if isinstance(value, list) else value
                else:
                    raise UserError(f"unknown task study option {name!r}; valid: "
                                     f"{', '.join(sorted(OPTION_PATHS))} or a field")
        parts = {key: replace(getattr(self, key), **nested[key]) for key in NESTED
                 if nested[key]}
        return replace(self, **ours, **parts)

#: Kazemnejad et al. (2023)'s decoder-only runs, mirrored from the configuration of their code
#: release (github.com/McGill-NLP/length-generalization: configs/trainer/default.jsonnet,
#: configs/models/custom_t5_base_dec_only.jsonnet): a decoder of T5-base's size (12 layers of
#: width 768, 12 heads), 50,000 steps of 256 examples, lr 3e-4 with 6 % warmup, no weight
#: decay. posenc counts a task's length over the whole example (input and answer), so L = 40
#: holds up to 20 letters to copy or reverse (addition: operands of up to 12 digits), and
#: testing at up to 2L doubles them, as their train-up-to-20, test-up-to-40 split.
KAZEMNEJAD_SHAPE = {"d_model": 768, "n_layers": 12, "n_heads": 12, "train_len": 40,
                    "steps": 50_000, "batch_size": 256, "lr": 3e-4}
KAZEMNEJAD_TASKS = ("copy", "reverse", "addition")

#: the CPU study's decoder-only setting: copying up to 10 letters (L = 20, input and answer)
#: and tested on up to 20 (2L), half the lengths of Kazemnejad et al.'s split (``tasks-paper``:
#: up to 20 letters in training, 40 in testing), with 16,000 steps of 32 examples. Measured
#: on the 2-core machine (one seed each): at 8,000 steps RoPE copied every length-L input but
#: NoPE only half of them; at 16,000 NoPE two in three, so the verdicts past L compare models
#: that learned the task at L. Nearer lengths than 1.5L are tested too, since exact match of a
#: whole answer falls to 0 within a few letters past L.
TASKS_SHAPE = {"train_len": 20, "steps": 16_000}
TASKS_MULTIPLIERS = (1, 1.1, 1.25, 1.5, 2)

#: the state-tracking study on the CPU: flip-flop strings (Liu et al. 2023's FFL(0.8); their
#: strings have 512 tokens, these at most L = 32 in training) tested up to 8L, where reads lie
#: further from their write than any in training; RoPE, NoPE, ALiBi, stick-breaking, which
#: breaks its stick at the nearest matching key (the last write), and PaTH, whose
#: data-dependent transform Yang et al. (2025) propose for state tracking, 3 seeds
STATE_ENCODINGS = ("rope", "nope", "alibi", "stick_breaking", "path")
STATE_SHAPE = {"train_len": 32, "steps": 1500}
STATE_MULTIPLIERS = (1, 2, 4, 8)

TASK_PRESETS: dict[str, TaskStudyConfig] = {
    "tasks": TaskStudyConfig(length_multipliers=TASKS_MULTIPLIERS).with_options(**TASKS_SHAPE),
    "tasks-cope": TaskStudyConfig(
        preset="tasks-cope", encodings=("cope", "rope", "nope"), lm_tasks=("selective_copy",),
        seq2seq_encodings=(), seq2seq_task=None).with_options(train_len=16),
    "tasks-state": TaskStudyConfig(
        preset="tasks-state", encodings=STATE_ENCODINGS, lm_tasks=("flip_flop",),
        length_multipliers=STATE_MULTIPLIERS, seq2seq_encodings=(), seq2seq_task=None,
    ).with_options(**STATE_SHAPE),
    "tasks-paper": TaskStudyConfig(
        preset="tasks-paper", lm_tasks=KAZEMNEJAD_TASKS, length_multipliers=(1, 1.5, 2),
        seq2seq_encodings=(), seq2seq_task=None,
    ).with_options(**KAZEMNEJAD_SHAPE, **{"train.warmup_steps": 3000,
                                          "train.weight_decay": 0.0}),
    "tasks-smoke": TaskStudyConfig(
        preset="tasks-smoke", encodings=("nope", "alibi"), seq2seq_encodings=("rope",),
        seeds=(0, 1), length_multipliers=(1, 2), eval_examples=8,
    ).with_options(train_len=8, d_model=16, n_layers=1, n_heads=2, steps=4, batch_size=4,
                   seq2seq_len=4, seq2seq_min_len=2, seq2seq_steps=4),
}


#: what each preset is for, and its wall time on the 2-core CPU machine from an empty
#: directory (minutes; None: not measured here); ``posenc tasks --help`` and the README quote
#: them
TASK_PRESET_PURPOSE = {
    "tasks": "NoPE, T5, ALiBi, RoPE and sinusoidal copy up to 10 letters, tested on up to 20; "
             "encoder-decoders reverse; 3 seeds",
    "tasks-cope": "CoPE, RoPE and NoPE on selective copy, 3 seeds",
    "tasks-state": "RoPE, NoPE, ALiBi, stick-breaking and PaTH track the flip-flop language's "
                   "bit up to 8L, 3 seeds",
    "tasks-paper": "Kazemnejad et al.'s setting, for a GPU",
    "tasks-smoke": "the pipeline in seconds"}
TASK_PRESET_MINUTES: dict[str, float | None] = {"tasks": 13.9, "tasks-cope": 1.3,
                                                "tasks-state": 3.8, "tasks-paper": None,
                                                "tasks-smoke": 0.055}


def task_preset_help() -> str:
    """One line per task preset for ``--help``: its purpose and measured wall time."""
    return "; ".join(f"{name}: {TASK_PRESET_PURPOSE[name]}, "
                     f"{took_phrase(TASK_PRESET_MINUTES.get(name))}" for name in TASK_PRESETS)


def task_preset(name: str, **overrides: Any) -> TaskStudyConfig:
    """The task preset ``name`` with some options replaced (None values are ignored; names
    as :meth:`TaskStudyConfig.with_options` takes them)."""
    if name not in TASK_PRESETS:
        raise UserError(f"unknown task preset {name!r}; valid presets: "
                         f"{', '.join(TASK_PRESETS)}")
    return TASK_PRESETS[name].with_options(**overrides)
