"""Training: typed config, the loop, checkpoints, logs and data-parallel helpers."""

from .checkpoint import LoadedRun, load_run
from .config import TrainConfig, parse_options
from .loop import TrainingDiverged, TrainResult, resolve_vocab, train

__all__ = ["LoadedRun", "TrainConfig", "TrainResult", "TrainingDiverged", "load_run",
           "parse_options", "resolve_vocab", "train"]
