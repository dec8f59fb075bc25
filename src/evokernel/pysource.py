"""Python source to `ast` trees, safe from any thread.

CPython 3.11 keeps the recursion depth of its AST construction in per-interpreter state, so
two threads building trees at once can fail with "SystemError: AST constructor recursion
depth mismatch" (python/cpython#106905): the search's propose threads parse knob blocks while
other threads of the same process parse candidates. Every `ast.parse` and `ast.literal_eval`
of the package goes through here, under one lock (trees are small: microseconds each).

Sources come from untrusted hands (LLM answers, candidate files), and CPython's parser fails on
some valid-looking ones with other errors than `SyntaxError`: `RecursionError` or `MemoryError`
for deep nesting (`a.b.b...`, `f()()...`, `not not ...`), `ValueError` for NUL characters or
lone surrogates. `parse` turns those into `SyntaxError` and `literal_eval` into `ValueError`, so
a caller that handles the usual error handles every source.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


_UNPARSABLE = (RecursionError, MemoryError, ValueError)


def _why(err: BaseException) -> str:
    if isinstance(err, (RecursionError, MemoryError)):
        return "nested too deeply for the parser"
    if isinstance(err, UnicodeError):
        return "not valid Unicode text (a lone surrogate)"
    return str(err) or type(err).__name__


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` under the process-wide lock; any source the parser cannot
    take raises `SyntaxError`."""
    with _LOCK:
        try:
            return ast.parse(source, filename)
        except _UNPARSABLE as err:
            raise SyntaxError(_why(err)) from None


def literal_eval(text: str) -> Any:
    """`ast.literal_eval(text)` under the process-wide lock; malformed or unparsable text
    raises `ValueError` or `SyntaxError`."""
    with _LOCK:
        try:
            return ast.literal_eval(text)
        except (RecursionError, MemoryError) as err:
            raise ValueError(_why(err)) from None
