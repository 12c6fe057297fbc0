"""No internal forward or hook grows a keyword per feature: every ``forward`` and every
encoding hook in models/, attention/ and encodings/ takes at most six parameters besides
``self`` (what a call needs travels in one context object). The models' user-facing
``forward``/``generate`` keep their keywords."""

from __future__ import annotations

import ast
from pathlib import Path

import posenc

PACKAGE = Path(posenc.__file__).parent
HOOKS = {"embed", "transform_qk", "score_bias", "fused_bias", "score_mod", "value_term",
         "attn_scale", "forward"}
#: the public entry points of the models, whose keywords are the user's interface
USER_FACING = {("models/lm.py", "forward"), ("models/lm.py", "generate"),
               ("models/seq2seq.py", "forward"), ("models/seq2seq.py", "generate")}
MOST = 6


def _count(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args)]
    n = len(names) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
    return n - (1 if names and names[0] in ("self", "cls", "ctx") else 0)


def test_forwards_and_hooks_take_at_most_six_parameters():
    wide = []
    for folder in ("models", "attention", "encodings"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            rel = str(path.relative_to(PACKAGE))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef) and node.name in HOOKS \
                        and (rel, node.name) not in USER_FACING and _count(node) > MOST:
                    wide.append(f"{rel}:{node.lineno} {node.name} ({_count(node)})")
    assert wide == []
