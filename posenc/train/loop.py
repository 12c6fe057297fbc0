"""The training loop behind ``posenc train``: AdamW, warmup + cosine, clipping, checkpoints.

Step ``s`` (0-based) trains on a batch drawn from ``(seed, s)`` (see
:mod:`posenc.data.batches`), so a resumed run sees the same data as an uninterrupted one, and
with the weights, optimizer, scheduler and RNG restored its loss curve is the same. With
``pack`` the batches (validation too) bring their ``document_ids`` and the model reads each
document alone. Under ``torchrun`` the model is wrapped in DistributedDataParallel, each
process trains on its shard of the global batch (the loss is the mean over the global
batch's scored targets, as in one process: :func:`rank_weight`), and rank 0 alone writes
files and draws the progress bar.

The run folder follows the study core's rules (:class:`posenc.study.RunDirectory`, kind
:data:`TRAIN_KIND`): rank 0 holds its lock from before it looks at the folder until the run
ends, so a second writer is refused and ``overwrite`` never deletes the files of a live run;
a folder that holds the same run (config.json) resumes from its last checkpoint, one that
holds another run is refused naming the settings that differ, one with files posenc did not
write is refused, and ``overwrite`` removes only the run's own files. A step with a non-finite
loss or gradient norm stops the run with :class:`TrainingDiverged` (after ``skip_bad_steps``
skipped ones): the last checkpoint, written while every value was finite, stays the committed
one.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..data.batches import TrainData, prepare_data
from ..data.cache import default_cache_dir
from ..data.synthetic import IGNORE
from ..data.tokenizer import load_tokenizer
from ..errors import UserError
from ..models.lm import TransformerLM
from ..study import API_NAMES, RunDirectory, StudyKind
from . import checkpoint as ckpt
from . import distributed as dist
from .config import TrainConfig
from .host_allocator import keep_freed_host_memory
from .logging import RunLog, progress_bar
from .memory import check_train_memory
from .optim import param_groups

#: config fields that may change when resuming (they do not change the loss curve)
RESUMABLE_CHANGES = ("cache_dir", "device", "checkpoint_every", "model.attn_backend",
                     "skip_bad_steps", "compile")


class TrainingDiverged(RuntimeError):
    """A step gave a non-finite loss or gradient norm (and no skips were left)."""


@dataclass(frozen=True)
class TrainResult:
    """How a run ended: ``final_loss`` is the last step's training loss."""

    run_dir: Path
    steps: int
    final_loss: float
    tokens_per_s: float
    val_loss: float | None = None


StepCallback = Callable[[int, dict[str, Any], nn.Module], None]


def lr_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Multiplier of the peak lr before step ``step`` (0-based): linear warmup, then cosine
    decay from 1 to ``min_ratio`` at the last step."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - 1 - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over :func:`~posenc.train.optim.param_groups` (no decay on norms, biases and
    positional-encoding parameters; an encoding may scale its parameters' lr)."""
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay, cfg.lr), lr=cfg.lr,
                             betas=cfg.betas)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, cfg.warmup, cfg.steps, cfg.min_lr_ratio))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over positions whose target is not -100. logits (B, T, V)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(),
                           ignore_index=IGNORE)


def rank_weight(info: dist.DistInfo, targets: torch.Tensor) -> float:
    """What this process's mean loss is multiplied by so that the mean over processes (what
    DDP does to gradients) is the mean over the global batch's scored targets: its scored
    targets over their mean per process. 1.0 in one process, and whenever every process
    scores as many (packed documents and tasks ignore some targets)."""
    if not info.enabled:
        return 1.0
    scored = float((targets != IGNORE).sum())
    mean = dist.mean(info, scored)
    return scored / mean if mean else 1.0


#: a training run's folder as the study core's run directory knows it: config.json marks it
#: and holds its settings; overwrite removes the run's files and folders, nothing else
TRAIN_KIND = StudyKind(name="train", schema=0, command="posenc train",
                       outputs=ckpt.RUN_FILES + ckpt.RUN_DIRS, record=ckpt.CONFIG_FILE,
                       legacy=lambda doc: doc.get("format") == ckpt.FORMAT,
                       description="posenc run")


def run_directory(run_dir: Path, names: Mapping[str, str] = API_NAMES) -> RunDirectory:
    """The run folder as a :class:`~posenc.study.RunDirectory` (lock, checks, overwrite);
    its messages name the folder as ``names["run_dir"]``."""
    return RunDirectory(run_dir, TRAIN_KIND, {**names, "out": names["run_dir"]})


def incomparable_run(run_dir: Path, cfg: TrainConfig) -> str | None:
    """The settings of the run in ``run_dir`` that differ from ``cfg``'s (but for
    :data:`RESUMABLE_CHANGES`), or None when ``cfg`` continues it."""
    old = ckpt.read_config(run_dir)["train"]
    diffs = [d for d in cfg.differences(old) if d not in RESUMABLE_CHANGES]
    return ", ".join(diffs[:8]) or None


def check_run_dir(run_dir: Path, cfg: TrainConfig, overwrite: bool,
                  names: Mapping[str, str] = API_NAMES) -> str:
    """"fresh", "overwrite" or "resume" (the folder holds this run: it continues from its
    last checkpoint), by the run directory's rules (:class:`~posenc.study.RunDirectory`:
    reads only); UserError when the folder holds another run or files posenc did not write
    (its message names the options as ``names`` spell them: :mod:`posenc.study.names`)."""
    directory = run_directory(run_dir, names)
    if directory.open(lambda doc: incomparable_run(run_dir, cfg), overwrite) is not None:
        return "resume"
    return "overwrite" if (run_dir / ckpt.CONFIG_FILE).is_file() else "fresh"


def resolve_vocab(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``model.vocab_size`` set to its tokenizer's (trains a BPE if needed)."""
    if cfg.tokenizer == "byte":
        return cfg.with_model(vocab_size=256)
    data = prepare_data(cfg.data, cfg.tokenizer, cfg.task, cfg.train_len, _cache_dir(cfg))
    return cfg.with_model(vocab_size=data.tokenizer.vocab_size)


def _cache_dir(cfg: TrainConfig) -> Path:
    return Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()


def check_prepared(cfg: TrainConfig, data: TrainData) -> None:
    """UserError unless ``data`` is what ``cfg`` would prepare: its task (or text), tokenizer
    and packing. (The corpus's content is checked on resume, by its hash.)"""
    if data.task != cfg.task or data.packed != cfg.pack \
            or data.tokenizer.spec != cfg.tokenizer:
        raise UserError(f"the prepared data (task {data.task!r}, tokenizer "
                         f"{data.tokenizer.spec!r}, packed {data.packed}) is not what the "
                         f"config asks for (task {cfg.task!r}, tokenizer {cfg.tokenizer!r}, "
                         f"pack {cfg.pack})")


def _load_data(cfg: TrainConfig, run_dir: Path, mode: str,
               prepared: TrainData | None = None) -> TrainData:
    if prepared is not None:
        check_prepared(cfg, prepared)
        data = prepared
        saved = run_dir / ckpt.TOKENIZER_DIR
        if mode == "resume" and saved.is_dir() \
                and load_tokenizer(saved).fingerprint != data.tokenizer.fingerprint:
            raise UserError(f"the prepared tokenizer {data.tokenizer.spec!r} is not the one "
                             f"{run_dir} was trained with; cannot resume")
    else:
        tokenizer: Any = cfg.tokenizer
        if mode == "resume" and (run_dir / ckpt.TOKENIZER_DIR).is_dir():
            tokenizer = load_tokenizer(run_dir / ckpt.TOKENIZER_DIR)
        data = prepare_data(cfg.data, tokenizer, cfg.task, cfg.train_len, _cache_dir(cfg),
                            pack=cfg.pack)
    if cfg.model.vocab_size < data.tokenizer.vocab_size:
        raise UserError(f"model vocab_size={cfg.model.vocab_size} is smaller than tokenizer "
                         f"{data.tokenizer.spec!r} ({data.tokenizer.vocab_size} ids)")
    if mode == "resume":
        recorded = ckpt.read_config(run_dir)["corpus"]
        if recorded.get("sha256") != data.corpus_info["sha256"]:
            raise UserError(f"the data changed since {run_dir} started (sha256 "
                             f"{recorded.get('sha256', '?')[:12]} != "
                             f"{data.corpus_info['sha256'][:12]}); cannot resume")
    return data


def _load_data_rank0_first(cfg: TrainConfig, run_dir: Path, mode: str,
                           info: dist.DistInfo, prepared: TrainData | None) -> TrainData:
    """Rank 0 tokenizes (and trains a BPE) first; the others then read its cache.

    If rank 0 fails, the others raise too instead of waiting for it forever.
    """
    if not info.enabled or prepared is not None:
        return _load_data(cfg, run_dir, mode, prepared)
    if info.is_main:
        try:
            data = _load_data(cfg, run_dir, mode)
        except BaseException:
            dist.broadcast_flag(info, False)
            raise
        dist.broadcast_flag(info, True)
        return data
    if not dist.broadcast_flag(info, False):
        raise UserError("rank 0 could not prepare the data (its error is above)")
    return _load_data(cfg, run_dir, mode)


def _autocast(cfg: TrainConfig, device: torch.device):
    if not cfg.bf16:
        return contextlib.nullcontext()
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError("bf16 was asked for but this GPU does not support bfloat16")
    return torch.autocast(device.type, dtype=torch.bfloat16)


@torch.no_grad()
def validation_loss(model: nn.Module, data: TrainData, cfg: TrainConfig,
                    device: torch.device) -> float:
    """Mean loss over the run's fixed validation examples (batches of ``batch_size``)."""
    examples = data.validation_set(cfg.eval_windows, cfg.train_len, cfg.seed)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, examples.inputs.shape[0], cfg.batch_size):
        b = examples.rows(i, i + cfg.batch_size).to(device)
        with _autocast(cfg, device):
            logits = model(b.inputs, document_ids=b.document_ids)
        n = int((b.targets != IGNORE).sum())
        total += lm_loss(logits, b.targets).item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


def train(cfg: TrainConfig, run_dir: str | Path, *, overwrite: bool = False,
          progress: bool = True, on_step: StepCallback | None = None,
          data: TrainData | None = None,
          names: Mapping[str, str] = API_NAMES) -> TrainResult:
    """Train ``cfg`` into ``run_dir`` (see the module docstring).

    A folder that holds this run (the same settings, but for
    :data:`RESUMABLE_CHANGES`) continues from its last checkpoint, a missing or empty one
    starts fresh, one that holds another run is refused; ``overwrite`` replaces a run already
    there. Bad input raises UserError / FileNotFoundError
    before anything in ``run_dir`` is touched. ``on_step(step, record, model)`` is called
    after every step (and its checkpoint), e.g. to stop early. ``data``: the run's data
    already prepared (:func:`~posenc.data.batches.prepare_data` of ``cfg``'s data, tokenizer
    and task; a study prepares it once for all its runs), else it is prepared here.
    ``names``: how messages name ``overwrite`` and ``run_dir`` (the CLI passes
    :data:`posenc.study.names.CLI_NAMES`).
    """
    for name, path in (("run_dir", run_dir), ("data", cfg.data), ("cache_dir", cfg.cache_dir)):
        if path == "":                      # the file system reads "" as the working directory
            raise UserError(f"{name} is an empty path; name a file or folder")
    run_dir = Path(run_dir)
    cfg = cfg.resolved()
    info = dist.setup(cfg.device)
    directory = run_directory(run_dir, names)
    try:
        if info.is_main:
            directory.__enter__()           # the lock, before looking: nobody changes it
        return _train(cfg, run_dir, info, (overwrite, names), progress, on_step, directory,
                      data)
    finally:
        directory.__exit__()
        dist.teardown(info)


def _train(cfg: TrainConfig, run_dir: Path, info: dist.DistInfo, asked: tuple,
           show_progress: bool, on_step: StepCallback | None,
           directory: RunDirectory, prepared: TrainData | None) -> TrainResult:
    mode = check_run_dir(run_dir, cfg, *asked)
    dev = info.device
    check_train_memory(cfg, dev)
    keep_freed_host_memory(dev)          # CPU only: freed tensors' pages reused each step
    data = _load_data_rank0_first(cfg, run_dir, mode, info, prepared)
    autocast = _autocast(cfg, dev)
    torch.manual_seed(cfg.seed)
    model = TransformerLM(cfg.model).to(dev).train()   # bad model options raise here
    dist.barrier(info)                                  # every rank checked before writing
    if info.is_main:
        # a new folder made and locked (refused if another process wrote it meanwhile);
        # with overwrite the run's own files removed
        directory.claim(overwrite=mode == "overwrite")
        ckpt.recover(run_dir)               # temporaries a crash left; see its docstring
        if mode != "resume":
            ckpt.write_config(run_dir, cfg, data.corpus_info, data.tokenizer)
    dist.barrier(info)

    optimizer = make_optimizer(model, cfg)
    scheduler = make_scheduler(optimizer, cfg)
    start, train_time, tokens_seen, bad_steps = 0, 0.0, 0, 0
    if mode == "resume" and ckpt.read_progress(run_dir) is not None:
        state = ckpt.load_training_state(run_dir, model, optimizer, scheduler, dev)
        start, train_time = int(state["step"]), float(state["train_time_s"])
        tokens_seen, bad_steps = int(state["tokens_seen"]), int(state.get("bad_steps", 0))
        if start >= cfg.steps:
            return TrainResult(run_dir, start, float(state.get("final_loss", math.nan)),
                               float(state.get("tokens_per_s", 0.0)), state.get("val_loss"))
    own_pe = model.pe
    if cfg.scaffold_pe is not None and start < cfg.scaffold_steps:
        model.use_shared_encoding(model.build_encoding(cfg.scaffold_pe).to(dev))
    net = model
    if info.enabled:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.index] if dev.type == "cuda" else None)
    if cfg.compile:
        net = torch.compile(net)                  # compiled on the first step
    log = RunLog(run_dir, start_step=start) if info.is_main else None
    bar = progress_bar(cfg.steps, initial=start, unit="step", desc=f"train {cfg.model.pe}",
                       enabled=show_progress and info.is_main)
    global_tokens = cfg.tokens_per_step * info.world_size
    loss_value, val_loss, committed = math.nan, None, start
    try:
        for step in range(start, cfg.steps):
            if cfg.scaffold_pe is not None and step == cfg.scaffold_steps:
                model.use_shared_encoding(own_pe)     # the scaffold dropped (DroPE)
            t0 = time.perf_counter()
            b = data.batch(cfg.batch_size, cfg.train_len, cfg.seed, step, info.rank,
                           info.world_size)
            weight = rank_weight(info, b.targets)
            b = b.to(dev)
            with autocast:
                logits = net(b.inputs, document_ids=b.document_ids)      # (B, T, V)
            loss = lm_loss(logits, b.targets) * weight
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(
                model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
            lr = optimizer.param_groups[0]["lr"]
            loss_value = dist.mean(info, loss.item())      # the same on every rank
            done = step + 1
            finite = math.isfinite(loss_value) and math.isfinite(float(grad_norm))
            if not finite:
                bad_steps += 1
                if bad_steps > cfg.skip_bad_steps:
                    kept = f"the last good checkpoint (step {committed}) is kept" \
                        if committed else "no checkpoint was written"
                    raise TrainingDiverged(
                        f"training diverged at step {done}: loss {loss_value}, gradient norm "
                        f"{float(grad_norm)}; {kept}; lower --lr or allow a few skipped "
                        f"steps with --skip-bad-steps")
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            train_time += time.perf_counter() - t0
            tokens_seen += global_tokens
            record = {"step": done, "loss": loss_value, "lr": lr,
                      "grad_norm": float(grad_norm), "tokens": tokens_seen,
                      "tokens_per_s": tokens_seen / train_time, "elapsed_s": train_time}
            if not finite:
                record["skipped"] = True
            last = done == cfg.steps
            if log is not None:
                log.write(record)
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{tokens_seen / train_time:,.0f}",
                            refresh=False)
            if info.is_main and ((cfg.eval_every and done % cfg.eval_every == 0) or last):
                val_loss = validation_loss(model, data, cfg, dev)
                log.write({"step": done, "val_loss": val_loss})
            if (cfg.checkpoint_every and done % cfg.checkpoint_every == 0) or last:
                if info.is_main:
                    log.flush(durable=True)
                    ckpt.save_checkpoint(run_dir, model, optimizer, scheduler, done, {
                        "steps": cfg.steps, "complete": last, "final_loss": loss_value,
                        "val_loss": val_loss, "tokens_per_s": tokens_seen / train_time,
                        "train_time_s": train_time, "tokens_seen": tokens_seen,
                        "bad_steps": bad_steps})
                committed = done
                dist.barrier(info)
            if on_step is not None:
                on_step(done, record, model)
    finally:
        bar.close()
        if log is not None:
            log.close()
    return TrainResult(run_dir, cfg.steps, loss_value, tokens_seen / max(train_time, 1e-9),
                       val_loss)
