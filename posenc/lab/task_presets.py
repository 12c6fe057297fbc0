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

- ``tasks``: the CPU preset (about 10 minutes on 2 cores with its 3 seeds).
- ``tasks-smoke``: a few steps of everything, for checking the pipeline in seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..errors import UserError
from ..data.synthetic import SEQ2SEQ_TASKS, TASKS, min_length
from ..encodings import list_encodings
from ..encodings.checks import require_int_at_least, require_positive_int

#: encodings of the decoder-only part: those Kazemnejad et al. (2023) compare (NoPE, T5's
#: bias, ALiBi, RoPE and an absolute encoding: sinusoidal, which runs past its training
#: length where a learned table cannot)
PAPER_ENCODINGS = ("nope", "t5", "alibi", "rope", "sinusoidal")
#: options every run uses for these encodings (see :meth:`TaskStudyConfig.options_for`)
PE_OPTIONS: dict[str, dict[str, Any]] = {}
#: fields that select runs rather than change them
GRID_FIELDS = ("encodings", "seq2seq_encodings", "seeds")


@dataclass(frozen=True)
class TaskStudyConfig:
    """Everything that defines a task study (see the module docstring)."""

    preset: str = "tasks"
    encodings: tuple[str, ...] = PAPER_ENCODINGS
    seq2seq_encodings: tuple[str, ...] = ("sinusoidal", "rope", "t5", "alibi")
    seeds: tuple[int, ...] = (0, 1, 2)
    lm_tasks: tuple[str, ...] = ("copy",)
    train_len: int = 8
    min_train_len: int | None = None        # None: the task's shortest length
    length_multipliers: tuple[float, ...] = (1, 1.5, 2, 3, 4, 6, 8)
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    steps: int = 2000
    batch_size: int = 32
    lr: float = 3e-3
    seq2seq_task: str | None = "reverse"
    seq2seq_len: int = 8
    seq2seq_min_len: int = 4
    seq2seq_layers: int = 1
    seq2seq_steps: int = 1500
    seq2seq_lr: float = 5e-3
    eval_examples: int = 200
    eval_seed: int = 1_000_003

    def __post_init__(self) -> None:
        for name in ("encodings", "seq2seq_encodings"):
            names = getattr(self, name)
            unknown = [e for e in names if e not in list_encodings()]
            if unknown:
                raise UserError(f"unknown encoding(s) {', '.join(unknown)}; valid encodings: "
                                 f"{', '.join(list_encodings())}")
            if len(set(names)) != len(names):
                raise UserError(f"{name} lists an encoding twice: {', '.join(names)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UserError(f"seeds must be distinct integers >= 0, got {list(self.seeds)}")
        for seed in self.seeds:
            require_int_at_least("seeds", seed, 0)
        unknown = [t for t in self.lm_tasks if t not in TASKS]
        if unknown:
            raise UserError(f"unknown task(s) {', '.join(unknown)}; valid tasks: "
                             f"{', '.join(TASKS)}")
        if self.seq2seq_task is not None and self.seq2seq_task not in SEQ2SEQ_TASKS:
            raise UserError(f"unknown sequence-to-sequence task {self.seq2seq_task!r}; "
                             f"valid: {', '.join(SEQ2SEQ_TASKS)}")
        for name in ("train_len", "d_model", "n_layers", "n_heads", "steps", "batch_size",
                     "seq2seq_len", "seq2seq_min_len", "seq2seq_layers", "seq2seq_steps",
                     "eval_examples"):
            require_positive_int(name, getattr(self, name))
        require_int_at_least("eval_seed", self.eval_seed, 0)
        if self.d_model % self.n_heads:
            raise UserError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")
        for task in self.lm_tasks:
            lo = self.min_len_for(task)
            if not lo <= self.train_len:
                raise UserError(f"task {task!r} needs min_train_len >= {min_length(task)} "
                                 f"and <= train_len={self.train_len}, got {lo}")
        if self.seq2seq_min_len > self.seq2seq_len:
            raise UserError(f"seq2seq_min_len={self.seq2seq_min_len} must be <= "
                             f"seq2seq_len={self.seq2seq_len}")
        if not self.length_multipliers or min(self.length_multipliers) != 1 \
                or any(m < 1 for m in self.length_multipliers):
            raise UserError("length_multipliers must start at 1 and be >= 1, got "
                             f"{list(self.length_multipliers)}")
        for name in ("lr", "seq2seq_lr"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise UserError(f"{name} must be a number > 0, got {value!r}")

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
        from ..models.blocks import embedding_init_std
        options = dict(PE_OPTIONS.get(encoding, {}))
        if encoding == "sinusoidal":
            options.setdefault("scale", round(embedding_init_std(self.d_model), 6))
        return options

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def setting(self) -> dict[str, Any]:
        """The fields every run shares: equal settings make two studies comparable."""
        return {k: v for k, v in self.to_dict().items()
                if k not in GRID_FIELDS and k != "preset"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskStudyConfig:
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - valid)
        if unknown:
            raise UserError(f"unknown task study key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


TASK_PRESETS: dict[str, TaskStudyConfig] = {
    "tasks": TaskStudyConfig(),
    "tasks-smoke": TaskStudyConfig(
        preset="tasks-smoke", encodings=("nope", "alibi"), seq2seq_encodings=("rope",),
        seeds=(0, 1), train_len=8, length_multipliers=(1, 2), d_model=16, n_layers=1,
        n_heads=2, steps=4, batch_size=4, seq2seq_len=4, seq2seq_min_len=2,
        seq2seq_steps=4, eval_examples=8),
}


def task_preset(name: str, **overrides: Any) -> TaskStudyConfig:
    """The task preset ``name`` with some fields replaced (None values are ignored)."""
    if name not in TASK_PRESETS:
        raise UserError(f"unknown task preset {name!r}; valid presets: "
                         f"{', '.join(TASK_PRESETS)}")
    changes = {k: v for k, v in overrides.items() if v is not None}
    valid = {f.name for f in fields(TaskStudyConfig)}
    unknown = sorted(set(changes) - valid)
    if unknown:
        raise UserError(f"unknown task study option(s) {', '.join(unknown)}")
    return replace(TASK_PRESETS[name], **{k: tuple(v) if isinstance(v, list) else v
                                          for k, v in changes.items()})
