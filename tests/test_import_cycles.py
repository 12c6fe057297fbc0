"""No import cycles: posenc's modules import each other one way, counting imports inside
functions too (an import moved into a function hides a cycle from Python, not from the
design), and the rooms of ``posenc.lab`` import each other one way as well.

Package ``__init__`` faces are left out: a module that imports ``posenc.encodings`` depends on
the names the face re-exports, not on every module of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_files(package_dir: Path) -> dict[str, Path]:
    """{dotted module name: file} of every module under ``package_dir`` (a package's
    ``__init__.py`` under the package's own name)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name ``module`` imports, anywhere in its file (relative imports resolved;
    ``from p import m`` gives ``p.m`` as well as ``p``, the caller keeps what is a module)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """{module: modules it imports} among the modules of ``package_dir``; package faces
    (``__init__``) are neither nodes nor targets."""
    files = module_files(package_dir)
    modules = {m for m, p in files.items() if p.name != "__init__.py"}
    graph = {}
    for m in sorted(modules):
        names = imported_names(m, files[m])
        graph[m] = {n if n in modules else n.rpartition(".")[0] for n in names} & modules - {m}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan 1972),
    each as a sorted list; a self-import is not counted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def room_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """{room: rooms it imports} for the sub-packages ("rooms") of ``package``."""
    prefix = package + "."

    def room(m: str) -> str | None:
        rest = m[len(prefix):].split(".") if m.startswith(prefix) else []
        return rest[0] if len(rest) > 1 else None

    rooms: dict[str, set[str]] = {}
    for m, targets in graph.items():
        if room(m) is not None:
            rooms.setdefault(room(m), set()).update(
                room(t) for t in targets if room(t) not in (None, room(m)))
    return rooms


def test_posenc_has_no_import_cycle():
    cycles = find_cycles(import_graph(ROOT / "posenc"))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_lab_rooms_import_each_other_one_way():
    rooms = room_graph(import_graph(ROOT / "posenc"), "posenc.lab")
    assert {"compare", "tasks", "claims", "report", "runs"} <= set(rooms)
    assert "report" in rooms["compare"] and "compare" in rooms["tasks"]
    cycles = find_cycles(rooms)
    assert not cycles, "cycles between the rooms of posenc.lab: " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n\ndef f():\n    return b.g()\n")
    (pkg / "sub" / "b.py").write_text("def g():\n    from ..a import f\n    return f\n")
    (pkg / "c.py").write_text("import pkg.a\nfrom . import sub\n")
    graph = import_graph(pkg)
    assert graph == {"pkg.a": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b"]]
    (pkg / "sub" / "b.py").write_text("def g():\n    return 1\n")
    assert find_cycles(import_graph(pkg)) == []


def test_rooms_that_import_each_other_are_a_cycle():
    graph = {"p.x.m": {"p.y.n"}, "p.y.n": {"p.y.o"}, "p.y.o": {"p.x.k"}, "p.x.k": set()}
    assert find_cycles(graph) == []
    assert find_cycles(room_graph(graph, "p")) == [["x", "y"]]
