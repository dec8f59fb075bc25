"""The package's structure: every import of src/evokernel points down the layer order below,
and no set of modules imports itself round. Every import is read from the source, wherever it
stands: at module level, inside a function, or under `if TYPE_CHECKING:`.

Layers, lowest first (a module may import its own layer and those below it):

  errors, reasons, pysource, device, files, nvml   base helpers
  model        checkpoints -> config (families), typed weights, quantized formats
  kernels      @triton.jit bodies (and CUDA sources)
  ops          op name -> implementation; the decode launchers
  tasks        kernel tasks: interface, reference, inputs, seeds
  evaluate     static check, isolated workers, correctness, paired timing
  engine       decode engine and its kernel packs (uses the evaluator's static check)
  evolve       the search
  bench        benchmarks (of the engine, the evaluator and the search)
  tune         `evokernel tune`: searches at a checkpoint's shapes -> a pack
  serve        the OpenAI-compatible server
  report       HTML reports of runs and benchmarks
  cli          the verbs
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = [
    {"errors", "pysource", "device", "files", "nvml", "reasons", "evokernel"},
    {"model"},
    {"kernels"},
    {"ops"},
    {"tasks"},
    {"evaluate"},
    {"engine"},
    {"evolve"},
    {"bench"},
    {"tune"},
    {"serve"},
    {"report"},
    {"cli", "__main__"},
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (SRC / "evokernel").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for mod, path in mods.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names] or [base]
            for name in names:
                if name.startswith("evokernel"):
                    target = _resolve(name, mods)
                    if target and target != mod:
                        targets.add(target)
        edges[mod] = targets
    return edges


def _layer(mod: str) -> int:
    parts = mod.split(".")
    return LEVEL[parts[1] if len(parts) > 1 else parts[0]]


def test_every_package_has_a_layer() -> None:
    missing = {m.split(".")[1] for m in _modules() if "." in m} - set(LEVEL)
    assert not missing, f"place these packages in LAYERS: {sorted(missing)}"


def test_imports_point_down() -> None:
    edges = _imports(_modules())
    upward = sorted(
        f"{a} -> {b}" for a, targets in edges.items() for b in targets if _layer(b) > _layer(a)
    )
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_no_import_circles() -> None:
    edges = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"
