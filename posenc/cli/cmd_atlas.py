"""``posenc atlas``: draw the atlas of positional encodings (optionally with a trained run).

Into an existing ``--out`` the command draws holding its lock
(:class:`posenc.runio.DirectoryLock`): a second writer is refused, and the temporaries a killed
atlas left there are deleted. A new ``--out`` is made by the atlas once its input is checked."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..errors import UserError
from ..runio import DirectoryLock
from .args import path_arg

NAME = "atlas"
HELP = "draw one figure per idea about positional encodings, with index.html and atlas.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=path_arg,
                   help="directory to write (created if needed)")
    p.add_argument("--run", metavar="RUN_DIR", type=path_arg,
                   help="a `posenc train` run, or runs/<encoding>/seed<k> inside a `posenc "
                        "compare` directory: adds its learned biases and attention maps at L "
                        "and 4L")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the files of the same names (an earlier atlas) in --out")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from ..atlas import atlas_files, write_atlas

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a directory")
    if not out.is_dir():
        return _draw(args, out, atlas_files, write_atlas)
    with DirectoryLock(out, "posenc atlas", subfolders=()):
        return _draw(args, out, atlas_files, write_atlas)


def _draw(args: argparse.Namespace, out: Path, atlas_files, write_atlas) -> int:
    taken = [name for name in atlas_files() if (out / name).exists()]
    if taken and not args.overwrite:
        shown = ", ".join(taken[:3]) + (", ..." if len(taken) > 3 else "")
        raise UserError(f"{out} already holds {shown}; pass --overwrite to replace them")
    start = time.perf_counter()

    def progress(name: str) -> None:
        if not args.quiet:
            print(f"  drawing {name}", file=sys.stderr, flush=True)

    result = write_atlas(out, run_dir=args.run, progress=progress)
    print(f"atlas: {len(result['panels'])} panels, {len(result['images'])} figures in "
          f"{time.perf_counter() - start:.1f} s -> {result['html']}")
    return 0
