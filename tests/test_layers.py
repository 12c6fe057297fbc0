"""Dependencies point one way: cli -> lab/hf -> atlas -> viz -> train/eval -> models ->
attention -> methods -> encodings -> kernels, with data and the file utilities below what uses them.

The test parses every module of the package (imports inside functions included) and fails on
an import that points up or sideways.
"""

from __future__ import annotations

import ast
from pathlib import Path

import posenc

PACKAGE = Path(posenc.__file__).parent

#: layer of each subpackage or top-level module: a module imports only lower layers (and its
#: own subpackage)
LAYERS = {
    "errors": -1, "runio": 0, "paths": 0, "suggest": 0,
    "kernels": 1, "data": 1, "study": 1,
    "encodings": 2,
    "methods": 3,
    "attention": 4,
    "models": 5,
    "train": 6, "eval": 6,
    "viz": 7,
    "atlas": 8,
    "lab": 9, "hf": 9,
    "cli": 10,
}
#: modules that may import anything (the public entry points)
ENTRY_POINTS = {"__init__", "__main__"}


def _imports(path: Path) -> set[str]:
    """Absolute names of the posenc modules ``path`` imports (relative imports resolved)."""
    package = ["posenc", *path.relative_to(PACKAGE).parts[:-1]]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                if node.module:                   # "from .. import x" imports x, not ..
                    names.add(name)
                names.update(f"{name}.{alias.name}" for alias in node.names)
            elif node.module:
                names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n == "posenc" or n.startswith("posenc.")}


def _unit(name: str) -> str:
    """The layer unit of a module name: its subpackage or top-level module."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        unit = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        yield path, unit


def test_every_subpackage_has_a_layer():
    units = {unit for _, unit in _modules()} - ENTRY_POINTS
    assert units <= set(LAYERS), f"give these a layer: {sorted(units - set(LAYERS))}"


def test_imports_point_down():
    wrong = []
    for path, unit in _modules():
        if unit in ENTRY_POINTS:
            continue
        for name in _imports(path):
            target = _unit(name)
            if target in (unit, "__init__") and name != "posenc":
                continue                        # inside its own subpackage
            if name == "posenc":                # the root re-exports models and encodings
                if unit != "cli":
                    wrong.append(f"{path.relative_to(PACKAGE.parent)} imports posenc")
            elif LAYERS.get(target, -1) >= LAYERS[unit]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_encodings_never_import_attention():
    offenders = [f"{path.name}: {name}" for path, unit in _modules() if unit == "encodings"
                 for name in _imports(path) if _unit(name) == "attention"]
    assert not offenders
