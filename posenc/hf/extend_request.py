"""What ``posenc extend`` is asked to measure (:class:`ExtendRequest`, compared on resume)
and how to run it (:class:`ExtendRuntime`, not compared): the inputs of
:class:`posenc.hf.extend_study.ExtendStudy`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..study import encode
from ..study.ray_units import RayCluster
from .extension_settings import DEFAULT_DEPTHS, DEFAULT_METHODS, ExtensionSettings
from .finetune import FinetuneConfig

#: results.json keys of the request's fields that are spelled otherwise there
SETTING_KEYS = {"eval_windows": "windows"}


@dataclass(frozen=True)
class ExtendRequest:
    """What to measure, as asked (the settings a resume must repeat). ``lengths=None``: 1x,
    1.5x and 2x the original length (``original=None``: the native context); ``passkey_lengths=None``: ``lengths``;
    ``finetune_len=None``: the longest length."""

    model: str
    data: str | None = None
    dtype: str = "float32"
    methods: tuple[str, ...] = DEFAULT_METHODS
    factor: float = 2.0
    lengths: tuple[int, ...] | None = None
    original: int | None = None
    stride: int | None = None
    eval_windows: int = 2
    passkey: bool = False
    passkey_lengths: tuple[int, ...] | None = None
    passkey_depths: tuple[float, ...] = DEFAULT_DEPTHS
    passkey_trials: int = 2
    finetune_steps: int | None = None
    finetune_len: int | None = None
    finetune_lr: float = 2e-5
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def config(self, lengths: tuple[int, ...],
               memory_limit: int | None = None) -> ExtensionSettings:
        """The :class:`ExtensionSettings` at ``lengths`` (raises on any bad value)."""
        tune = None
        if self.finetune_len is not None and self.finetune_steps is None:
            raise UserError("finetune length needs finetune steps")
        if self.finetune_steps is not None:
            tune = FinetuneConfig(self.finetune_steps, self.finetune_len or max(lengths),
                                  lr=self.finetune_lr, seed=self.seed)
        return ExtensionSettings(methods=tuple(self.methods), factor=self.factor,
                           lengths=tuple(lengths), original=self.original, stride=self.stride,
                           eval_windows=self.eval_windows, passkey=self.passkey,
                           passkey_lengths=tuple(self.passkey_lengths or lengths)
                           if self.passkey else (),
                           passkey_depths=tuple(self.passkey_depths),
                           passkey_trials=self.passkey_trials, finetune=tune,
                           memory_limit=memory_limit, seed=self.seed,
                           method_options=dict(self.options))

    def setting(self) -> dict[str, Any]:
        """The request as results.json keeps it (``eval_windows`` under the key results have
        always had, ``windows``); options that do nothing (the passkey's without
        ``passkey``, the fine-tune's without steps) as null."""
        setting = {SETTING_KEYS.get(key, key): value for key, value in asdict(self).items()}
        if not self.passkey:
            setting.update(passkey_lengths=None, passkey_depths=None, passkey_trials=None)
        if self.finetune_steps is None:
            setting.update(finetune_len=None, finetune_lr=None)
        return encode(setting)


@dataclass(frozen=True)
class ExtendRuntime:
    """How to run (not compared on resume). ``gguf_cache=None``: no cache; ``save``: also
    save the extended model there (one method besides 'none', no fine-tuning)."""

    device: str = "cpu"
    device_map: str | None = None
    gguf_cache: str | Path | None = None
    threads: int | None = None
    memory_limit: int | None = None
    save: str | None = None
    #: run the units on this Ray cluster (:mod:`posenc.study.ray_units`); None: here
    cluster: RayCluster | None = None
