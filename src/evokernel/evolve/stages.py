"""The sandboxed side of a generic evaluation: call one function of the user's evaluator.

`run_stage(evaluator, function, program)` runs in the process `run_isolated` starts (never in
the search's own process). It imports the evaluator file the way OpenEvolve does (its
directory first on `sys.path`, module name `evaluation_module`), calls `function(program)`
and returns the result in a form that crosses the process boundary as JSON:

    {"form": "dict" | "EvaluationResult", "metrics": {...}, "artifacts": {...}}
    {"form": "other", "type": "list"}            # not a dict and not an EvaluationResult

Values are made plain here, where the user's types live: numpy and other numeric scalars
become Python numbers (`.item()`, or `float()` for any `numbers.Real`), booleans stay
booleans, NaN and infinities become the strings "nan", "inf", "-inf" (JSON has no such
numbers; the parent treats them as non-numeric), and anything else becomes its text. An
`EvaluationResult` is recognised by shape (a `metrics` mapping, an optional `artifacts`
mapping), so OpenEvolve's class and any look-alike work. Artifacts are text (bytes decoded as
UTF-8 with replacement), each capped at `MAX_ARTIFACT_CHARS`.

When `openevolve` is not installed, `compat/` (a stand-in providing
`openevolve.evaluation_result.EvaluationResult`) goes at the end of `sys.path`, so OpenEvolve's
published evaluators import unchanged.

This module imports only the standard library: it is loaded by file path inside the sandbox.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import os
import sys
from collections.abc import Mapping
from typing import Any

MAX_ARTIFACT_CHARS = 65536
MAX_DEPTH = 8


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


def plain(value: Any, depth: int = 0) -> Any:
    """`value` as JSON-safe Python (see the module docstring)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    item = getattr(value, "item", None)
    if not isinstance(value, float) and callable(item) and getattr(value, "shape", None) == ():
        try:
            return plain(item(), depth)  # numpy scalars and 0-d arrays
        except (TypeError, ValueError):
            pass
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else repr(number)
    if depth < MAX_DEPTH and isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        return [plain(v, depth + 1) for v in value]
    return _text(value)[:MAX_ARTIFACT_CHARS]


def _with_compat() -> None:
    try:
        import openevolve.evaluation_result  # noqa: F401  (the real package wins)
    except ImportError:
        compat = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compat")
        if compat not in sys.path:
            sys.path.append(compat)


def load(evaluator: str) -> Any:
    folder = os.path.dirname(os.path.abspath(evaluator))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    _with_compat()
    spec = importlib.util.spec_from_file_location("evaluation_module", evaluator)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {evaluator}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluation_module"] = module
    spec.loader.exec_module(module)
    return module


def normalize(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return {"form": "dict", "metrics": plain(dict(value)), "artifacts": {}}
    metrics = getattr(value, "metrics", None)
    if isinstance(metrics, Mapping):
        artifacts = getattr(value, "artifacts", None) or {}
        if not isinstance(artifacts, Mapping):
            artifacts = {"artifacts": artifacts}
        return {
            "form": "EvaluationResult",
            "metrics": plain(dict(metrics)),
            "artifacts": {str(k): _text(v)[:MAX_ARTIFACT_CHARS] for k, v in artifacts.items()},
        }
    return {"form": "other", "type": type(value).__name__}


def run_stage(evaluator: str, function: str, program: str) -> dict[str, Any]:
    """`function(program)` of the evaluator file, normalized (see the module docstring)."""
    module = load(evaluator)
    fn = getattr(module, function, None)
    if not callable(fn):
        raise AttributeError(f"the evaluator defines no function {function}(path)")
    return normalize(fn(program))
