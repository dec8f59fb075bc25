"""No import circles in the search and the evaluator: a module never imports, even lazily
inside a function, a module that imports it back; and the evaluator (below the search) never
imports the search. Imports under `if TYPE_CHECKING:` are left out: they never run.

The graph is read from the source (every `import` statement, at any depth), so a lazy import
that would close a circle at run time fails here at once."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGES = ("evokernel.evolve", "evokernel.evaluate")


def _name(path: Path) -> str:
    parts = list(path.with_suffix("").relative_to(SRC).parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in SRC.rglob("*.py")}


def _imports(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*up, *([child.module] if child.module else [])])
                found.add(base)
                found.update(f"{base}.{a.name}" for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _inside(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in PACKAGES)


def _circles() -> list[list[str]]:
    """Strongly connected components (Tarjan) of more than one module among PACKAGES."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in (w for w in GRAPH[v] if _inside(w)):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(GRAPH):
        if _inside(v) and v not in index:
            connect(v)
    return out


def test_no_import_circles_in_the_search_or_the_evaluator():
    assert _circles() == []


def test_the_evaluator_never_imports_the_search():
    upward = {
        (name, target)
        for name, targets in GRAPH.items()
        if name.startswith("evokernel.evaluate")
        for target in targets
        if target.startswith("evokernel.evolve")
    }
    assert upward == set()


def test_the_walker_sees_lazy_imports():
    # A function-level import is an edge (jobs imports the generic evaluation lazily).
    assert "evokernel.evolve.generic_eval" in GRAPH["evokernel.evolve.jobs"]
