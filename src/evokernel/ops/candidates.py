"""Load a candidate file (a task seed or an evolved winner) as an op implementation.

A candidate is one self-contained Python file defining its task's entry point
(`attention(q, k_cache, v_cache, seq_lens, scale)` for `gqa_decode_attention`,
`linear(x, weight)` for `decode_linear`, `decode_layer(h, ...)` for `decode_layer`). It is
imported by path under a module name derived from the file's absolute path and contents, so
two candidates never share a module and re-loading the same file is free. Candidates may
define `@triton.jit` kernels, so the Triton mode must be set first
(`evokernel.device.prepare`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evokernel.errors import TaskError

SEEDS_DIR = Path(__file__).resolve().parent.parent / "tasks"

# Engine op name -> (task name, entry point) for ops that are kernel tasks.
TASK_OPS: dict[str, tuple[str, str]] = {
    "decode_attention": ("gqa_decode_attention", "attention"),
    "linear": ("decode_linear", "linear"),
    "decode_layer": ("decode_layer", "decode_layer"),
}


def seed_path(op_name: str) -> Path:
    """Where the task seed implementing `op_name` lives (it may not exist yet)."""
    task, _ = TASK_OPS[op_name]
    return SEEDS_DIR / task / "seed.py"


def entry_point(op_name: str) -> str:
    """The function a candidate for `op_name` must define."""
    return TASK_OPS[op_name][1] if op_name in TASK_OPS else op_name


def load_candidate(path: str | Path, entry: str) -> Callable[..., Any]:
    """Import `path` and return its function `entry`; TaskError (one line) when impossible."""
    file = Path(path).resolve()
    if not file.is_file():
        raise TaskError(f"candidate {path}: no such file")
    source = file.read_bytes()
    digest = hashlib.sha256(str(file).encode() + b"\0" + source).hexdigest()[:16]
    name = f"evokernel_candidate_{digest}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise TaskError(f"candidate {path}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Triton's JIT and dataclasses look the module up by name
        try:
            spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[name]
            detail = " ".join(str(err).split())
            raise TaskError(
                f"candidate {path}: import failed: {type(err).__name__}: {detail}"
            ) from err
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise TaskError(f"candidate {path}: defines no function {entry!r}")
    return fn
