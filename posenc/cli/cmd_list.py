"""``posenc list``: the table of registered encodings."""

from __future__ import annotations

import argparse
import json

from ..encodings import describe_encodings

NAME = "list"
HELP = "list the registered positional encodings and what they support"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def format_table(rows: list[dict]) -> str:
    """Fixed-width table of describe_encodings() rows."""
    cols = [("name", "encoding"), ("family", "family"), ("hooks", "hooks"),
            ("extrapolates", "extrapolates"), ("kv_cache", "kv cache"),
            ("backends", "backends")]
    cells = [[", ".join(r[k]) if isinstance(r[k], list) else str(r[k]) for k, _ in cols]
             for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (_, h) in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()
    return "\n".join([line([h for _, h in cols]), line(["-" * w for w in widths])]
                     + [line(c) for c in cells])


def run(args: argparse.Namespace) -> int:
    rows = describe_encodings()
    print(json.dumps(rows, indent=2, default=str) if args.json else format_table(rows))
    return 0
