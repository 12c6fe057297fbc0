"""``posenc list``: the table of registered encodings, then the named layer plans and the
lab's variants."""

from __future__ import annotations

import argparse
import json

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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print the encodings as JSON instead of the tables")


def _table(cols: list[tuple[str, str]], rows: list[dict]) -> str:
    cells = [[", ".join(r[k]) if isinstance(r[k], list) else str(r[k]) for k, _ in cols]
             for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (_, h) in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()
    return "\n".join([line([h for _, h in cols]), line(["-" * w for w in widths])]
                     + [line(c) for c in cells])


def format_table(rows: list[dict]) -> str:
    """Fixed-width table of describe_encodings() rows."""
    return _table([("name", "encoding"), ("family", "family"), ("hooks", "hooks"),
                   ("extrapolates", "extrapolates"), ("kv_cache", "kv cache"),
                   ("backends", "backends")], rows)


def format_options(options: dict) -> str:
    """``key=default`` pairs; a None default shows as ``auto`` (derived from max_len), or as
    ``{}`` for a ``*_options`` dict (no options)."""
    def shown(key, value):
        if value is None:
            return "{}" if key.endswith("_options") else DERIVED
        return f"{value:.10g}" if isinstance(value, float) else str(value)
    return ", ".join(f"{k}={shown(k, v)}" for k, v in options.items())


def format_plans(rows: list[dict]) -> str:
    """Fixed-width table of describe_plans() rows under :data:`PLANS_HEADING`."""
    shown = [{**r, "options": format_options(r["options"])} for r in rows]
    table = _table([("name", "plan"), ("summary", "summary"), ("options", "options")], shown)
    return (f"{PLANS_HEADING}\n{table}\n"
            f"({DERIVED}: derived from the model's max_len, see posenc.models.plans)")


def format_variants(rows: list[dict]) -> str:
    """Fixed-width table of the lab's variant_rows() under :data:`VARIANTS_HEADING`."""
    table = _table([("name", "variant"), ("pe", "encoding"), ("summary", "summary")], rows)
    return f"{VARIANTS_HEADING}\n{table}"


def format_methods(rows: list[dict]) -> str:
    """Fixed-width table of describe_methods() rows under :data:`METHODS_HEADING` (name, kind,
    whether a Hugging Face config and a GGUF file can hold it, the source), then each
    method's options."""
    yes = {True: "yes", False: "no"}
    shown = [{**r, "hf": yes[r["hf_config"]], "gguf": yes[r["gguf"]], "cite": r["cite"] or "-"}
             for r in rows]
    table = _table([("name", "method"), ("kind", "kind"), ("hf", "hf config"),
                    ("gguf", "gguf"), ("cite", "source")], shown)
    options = [f"  {r['name']}: {', '.join(r['options'])}" for r in rows if r["options"]]
    return f"{METHODS_HEADING}\n{table}\noptions (posenc extend --option KEY=VALUE):\n" + \
        "\n".join(options)


def run(args: argparse.Namespace) -> int:
    from ..lab.runs.variants import variant_rows
    from ..methods import describe_methods
    rows = describe_encodings()
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print(format_table(rows) + "\n\n" + format_plans(describe_plans()) + "\n\n"
              + format_methods(describe_methods()) + "\n\n" + format_variants(variant_rows()))
    return 0
