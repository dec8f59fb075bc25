"""The static pre-check: a fast look at a candidate's source before any process starts.

It is the first line of defence, not the last: it rejects what a well-meaning search should
never produce (imports outside the allowlist, process and thread control, introspection,
stream games, patching of library functions), so that those candidates cost no process. A
determined candidate can hide the same constructs from an AST walk (aliases through plain
variables, attribute names built at run time), which is why every defence also exists in the
worker and the parent; the test suite runs the hostile candidates with this check off.

`check_source(source) -> list[str]` returns reason lines (`static: line N: ...`), empty when the
source passes. `source_problems(source)` is the gate that holds with the pre-check off too:
every later stage parses or imports the source, in the parent or the worker, so a source over
`MAX_SOURCE_BYTES` (about ten times the largest seed; parsing costs seconds per MiB, under the
process-wide parser lock), one that is not UTF-8 text, or one that declares another encoding
never gets that far. `triton_kernels(source)` lists the names of `@triton.jit` functions (the
kernels the profiler must see).
"""

from __future__ import annotations

import ast
import codecs
import re

from evokernel import pysource
from evokernel.reasons import reason
from evokernel.tasks.blocks import BlockError, find_block

ALLOWED_MODULES = frozenset(
    {"torch", "torch.nn.functional", "triton", "triton.language", "math", "functools", "typing"}
)
ALLOWED_PREFIXES = ("triton.language.",)

# Names that must not appear at all: code execution, introspection, I/O, process control.
FORBIDDEN_NAMES = frozenset(
    {
        "exec", "eval", "compile", "__import__", "open", "globals", "locals", "vars",
        "getattr", "setattr", "delattr", "breakpoint", "input", "memoryview", "help",
        "__builtins__", "__loader__", "__spec__",
        "os", "sys", "subprocess", "ctypes", "threading", "multiprocessing", "signal", "time",
        "gc", "inspect", "builtins", "importlib", "socket", "pickle", "marshal", "shutil",
        "pathlib", "io", "resource", "_thread", "concurrent", "asyncio", "atexit", "weakref",
    }
)  # fmt: skip

# Dotted prefixes (after resolving import aliases) a candidate must not touch.
FORBIDDEN_DOTTED = (
    "torch.cuda.Stream", "torch.cuda.ExternalStream", "torch.cuda.Event", "torch.cuda.stream",
    "torch.cuda.streams", "torch.cuda.set_stream", "torch.cuda.current_stream",
    "torch.cuda.default_stream", "torch.cuda.synchronize", "torch.cuda.graph",
    "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda._sleep", "torch.cuda.memory",
    "torch.cuda.set_per_process_memory_fraction", "torch.cuda.empty_cache",
    "torch.cuda.reset_peak_memory_stats", "torch.cuda.nvtx", "torch.cuda.profiler",
    "torch.utils", "torch.jit", "torch.library", "torch.ops", "torch._C", "torch._dynamo",
    "torch._inductor", "torch.compile", "torch.backends", "torch.multiprocessing",
    "torch.distributed", "torch.hub", "torch.profiler", "torch.futures", "torch.classes",
    "torch.use_deterministic_algorithms", "torch.set_num_threads", "torch.set_default_dtype",
    "torch.set_default_device", "torch.allclose", "torch.equal", "torch.testing",
    "torch.save", "torch.load", "torch.from_file", "torch.Stream", "torch.Event",
    "torch.accelerator",
    "triton.runtime", "triton.compiler", "triton.testing", "triton.knobs", "triton.backends",
    "triton.profiler",
)  # fmt: skip

_JIT_DECORATORS = ("triton.jit", "jit")

MAX_SOURCE_BYTES = 256 << 10

_CODING = re.compile(r"coding[:=][ \t]*([-\w.]+)")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _declared_encodings(source: str) -> list[str]:
    """Every name in the first two lines that Python could take for a coding declaration.
    Looser than PEP 263 on purpose (no '#' needed, any line break, three lines under one
    reading): the tokenizer's own rules around CR and form feeds are not worth copying."""
    head = "\n".join(source.split("\n", 2)[:2] + _LINE_BREAK.split(source, 3)[:3])
    return _CODING.findall(head)


def _line_of(source: str, index: int) -> int:
    return source.count("\n", 0, index) + 1


def source_problems(source: str) -> list[str]:
    """Reason lines for a source no stage may take in (empty: it may go on): larger than
    `MAX_SOURCE_BYTES` in UTF-8, not encodable as UTF-8 (a lone surrogate), holding NUL, or
    declaring another encoding than UTF-8. The worker imports the source from a UTF-8 file,
    whose coding declaration Python obeys while the parent's checks of the text do not: under
    `# coding: utf-7` the comment `# +AAo-import os` imports os."""
    limit = f"the limit is {MAX_SOURCE_BYTES >> 10} KiB"
    if len(source) > MAX_SOURCE_BYTES:  # at least as many bytes: no need to encode it
        return [reason("static", f"the source is {len(source)} characters; {limit}")]
    try:
        data = source.encode("utf-8")
    except UnicodeEncodeError as err:
        where = _line_of(source, err.start)
        return [reason("static", f"line {where}: not valid Unicode text (a lone surrogate)")]
    if len(data) > MAX_SOURCE_BYTES:
        return [reason("static", f"the source is {len(data)} bytes in UTF-8; {limit}")]
    nul = source.find("\0")
    if nul >= 0:
        return [reason("static", f"line {_line_of(source, nul)}: a NUL character")]
    for name in _declared_encodings(source):
        try:
            utf8 = codecs.lookup(name).name == "utf-8"
        except LookupError:
            utf8 = False
        if not utf8:
            return [reason("static", f"a coding declaration of {name}; only UTF-8 is read")]
    return []


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`a.b.c` with the root resolved through import aliases; None for other shapes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    root = aliases.get(node.id)
    if root is None:
        return None
    return ".".join([root, *reversed(parts)])


def _module_allowed(name: str) -> bool:
    return name in ALLOWED_MODULES or name.startswith(ALLOWED_PREFIXES)


def _forbidden_dotted(name: str) -> str | None:
    for prefix in FORBIDDEN_DOTTED:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.problems: list[tuple[int, str]] = []

    def flag(self, node: ast.AST, what: str) -> None:
        self.problems.append((getattr(node, "lineno", 0), what))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not _module_allowed(alias.name):
                self.flag(node, f"import of {alias.name!r} (allowed: {sorted(ALLOWED_MODULES)})")
                continue
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                root = alias.name.split(".")[0]
                self.aliases[root] = root

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module == "__future__" and node.level == 0:
            return
        if node.level or not _module_allowed(module):
            self.flag(node, f"import from {'.' * node.level + module!r}")
            return
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"star import from {module!r}")
                continue
            full = f"{module}.{alias.name}"
            bad = _forbidden_dotted(full)
            if bad:
                self.flag(node, f"import of forbidden {bad!r}")
            self.aliases[alias.asname or alias.name] = full

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES and node.id not in self.aliases:
            self.flag(node, f"forbidden name {node.id!r}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """One attribute node, without recursing (the caller walks every node)."""
        if node.attr.startswith("__") and node.attr.endswith("__"):
            self.flag(node, f"dunder attribute {node.attr!r}")
        dotted = _dotted(node, self.aliases)
        if dotted is not None:
            bad = _forbidden_dotted(dotted)
            if bad:
                self.flag(node, f"forbidden {bad!r}")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root: ast.AST = node
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.aliases:
                self.flag(node, f"assignment to a library attribute ({dotted or node.attr})")

    def visit_Global(self, node: ast.Global) -> None:
        self.flag(node, "'global' statement")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.flag(node, "'nonlocal' statement")


def check_source(source: str) -> list[str]:
    """Reason lines for every problem found (empty: the source passes)."""
    try:
        tree = pysource.parse(source)
    except SyntaxError as err:
        where = f"line {err.lineno}: " if err.lineno else ""
        return [reason("static", f"{where}syntax error: {err.msg}")]
    try:
        find_block(source)
    except BlockError as err:
        return [reason("static", f"EVOLVE-BLOCK: {err}")]
    checker = _Checker()
    # Imports first, so aliases are known wherever a name is used (imports inside functions).
    nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            checker.visit(node)
    for node in nodes:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            method = getattr(checker, f"visit_{type(node).__name__}", None)
            if method is not None:
                method(node)
    seen: set[tuple[int, str]] = set()
    lines = []
    for lineno, what in sorted(checker.problems):
        if (lineno, what) in seen:
            continue
        seen.add((lineno, what))
        lines.append(reason("static", f"line {lineno}: {what}"))
    return lines


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def triton_kernels(source: str) -> list[str]:
    """Names of functions decorated with `triton.jit` (directly or under autotune etc.)."""
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(
            _decorator_name(d) in _JIT_DECORATORS or _decorator_name(d).endswith(".jit")
            for d in node.decorator_list
        ):
            names.append(node.name)
    return names
