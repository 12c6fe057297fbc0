"""``posenc list``: the table of registered encodings, then the named layer plans and the
lab's variants."""

from __future__ import annotations

import argparse
import json
import textwrap

from ..encodings import describe_encodings
from ..models.plans import describe_plans

NAME = "list"
HELP = ("list the registered positional encodings, the named layer plans, the lab variants "
        "and the context-extension methods")
#: the line that opens the plans table, after a blank line under the encodings
PLANS_HEADING = "named plans (LMConfig(plan=NAME) or plan={'name': NAME, option: value}):"
#: the line that opens the extension methods table
METHODS_HEADING = ("context-extension methods (posenc extend --method NAME, posenc compare "
                   "--scalings NAME:FACTOR):")
#: the line that opens the lab variants table
VARIANTS_HEADING = "lab variants (posenc compare --encodings NAME; in the default comparison):"
#: how an option derived from the model's max_len is shown
DERIVED = "auto"


#: the width the tables fit unless ``--wide`` (long cells wrap inside their column)
WIDTH = 100
#: the narrowest a column is wrapped to
MIN_COLUMN = 12


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print the encodings as JSON instead of the tables")
    p.add_argument("--wide", action="store_true", help=f"one line per row, however long "
                   f"(default: fit {WIDTH} columns, long cells wrapped in their column)")


def _fit(widths: list[int], floors: list[int], width: int) -> list[int]:
    """Column widths whose lines (two spaces between columns) fit ``width``: the widest
    column above its floor gives a character at a time."""
    widths = list(widths)
    while sum(widths) + 2 * (len(widths) - 1) > width:
        shrinkable = [i for i in range(len(widths)) if widths[i] > floors[i]]
        if not shrinkable:
            break
        widths[max(shrinkable, key=lambda i: widths[i])] -= 1
    return widths


def _table(cols: list[tuple[str, str]], rows: list[dict], width: int | None = WIDTH) -> str:
    """A fixed-width table; ``width=None``: one line per row."""
    cells = [[", ".join(r[k]) if isinstance(r[k], list) else str(r[k]) for k, _ in cols]
             for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (_, h) in enumerate(cols)]
    if width is not None:       # a column keeps its longest word whole (up to MIN_COLUMN)
        floors = [min(w, max(len(h), *(min(MIN_COLUMN, len(word)) for c in cells
                                       for word in c[i].split() or [""])))
                  for i, ((_, h), w) in enumerate(zip(cols, widths))]
        widths = _fit(widths, floors, width)
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()
    lines = [line([h for _, h in cols]), line(["-" * w for w in widths])]
    for row in cells:
        wrapped = [textwrap.wrap(c, w, break_on_hyphens=False) or [""]
                   for c, w in zip(row, widths)]
        lines += [line([c[i] if i < len(c) else "" for c in wrapped])
                  for i in range(max(map(len, wrapped)))]
    return "\n".join(lines)


def _wrap(text: str, width: int | None, indent: str = "    ") -> str:
    """``text`` as it is (``width=None``) or wrapped to ``width``, later lines indented."""
    if width is None:
        return text
    return "\n".join(textwrap.wrap(text, width, subsequent_indent=indent,
                                   break_on_hyphens=False))


def format_table(rows: list[dict], width: int | None = WIDTH) -> str:
    """Fixed-width table of describe_encodings() rows."""
    return _table([("name", "encoding"), ("family", "family"), ("hooks", "hooks"),
                   ("extrapolates", "extrapolates"), ("kv_cache", "kv cache"),
                   ("backends", "backends")], rows, width)


def format_options(options: dict) -> str:
    """``key=default`` pairs; a None default shows as ``auto`` (derived from max_len), or as
    ``{}`` for a ``*_options`` dict (no options)."""
    def shown(key, value):
        if value is None:
            return "{}" if key.endswith("_options") else DERIVED
        return f"{value:.10g}" if isinstance(value, float) else str(value)
    return ", ".join(f"{k}={shown(k, v)}" for k, v in options.items())


def format_plans(rows: list[dict], width: int | None = WIDTH) -> str:
    """Fixed-width table of describe_plans() rows under :data:`PLANS_HEADING`."""
    shown = [{**r, "options": format_options(r["options"])} for r in rows]
    table = _table([("name", "plan"), ("summary", "summary"), ("options", "options")], shown,
                   width)
    return (f"{_wrap(PLANS_HEADING, width)}\n{table}\n"
            f"({DERIVED}: derived from the model's max_len, see posenc.models.plans)")


def format_variants(rows: list[dict], width: int | None = WIDTH) -> str:
    """Fixed-width table of the lab's variant_rows() under :data:`VARIANTS_HEADING`."""
    table = _table([("name", "variant"), ("pe", "encoding"), ("summary", "summary")], rows,
                   width)
    return f"{_wrap(VARIANTS_HEADING, width)}\n{table}"


def format_methods(rows: list[dict], width: int | None = WIDTH) -> str:
    """Fixed-width table of describe_methods() rows under :data:`METHODS_HEADING` (name, kind,
    whether a Hugging Face config and a GGUF file can hold it, the source), then each
    method's options."""
    yes = {True: "yes", False: "no"}
    shown = [{**r, "hf": yes[r["hf_config"]], "gguf": yes[r["gguf"]], "cite": r["cite"] or "-"}
             for r in rows]
    table = _table([("name", "method"), ("kind", "kind"), ("hf", "hf config"),
                    ("gguf", "gguf"), ("cite", "source")], shown, width)
    options = [_wrap(f"  {r['name']}: {', '.join(r['options'])}", width)
               for r in rows if r["options"]]
    return f"{_wrap(METHODS_HEADING, width)}\n{table}\n" \
        "options (posenc extend --option KEY=VALUE):\n" + "\n".join(options)


def run(args: argparse.Namespace) -> int:
    from ..lab.runs.variants import variant_rows
    from ..methods import describe_methods
    rows = describe_encodings()
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        width = None if args.wide else WIDTH
        print(format_table(rows, width) + "\n\n" + format_plans(describe_plans(), width)
              + "\n\n" + format_methods(describe_methods(), width) + "\n\n"
              + format_variants(variant_rows(), width))
    return 0
