"""Python source to `ast` trees, safe from any thread.

CPython 3.11 keeps the recursion depth of its AST construction in per-interpreter state, so
two threads building trees at once can fail with "SystemError: AST constructor recursion
depth mismatch" (python/cpython#106905): the search's propose threads parse knob blocks while
other threads of the same process parse candidates. Every `ast.parse` and `ast.literal_eval`
of the package goes through here, under one lock (trees are small: microseconds each).
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` under the process-wide lock."""
    with _LOCK:
        return ast.parse(source, filename)


def literal_eval(text: str) -> Any:
    """`ast.literal_eval(text)` under the process-wide lock."""
    with _LOCK:
        return ast.literal_eval(text)
