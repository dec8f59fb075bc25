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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evokernel.errors import TaskError

SEEDS_DIR = Path(__file__).resolve().parent.parent / "tasks"


@dataclass(frozen=True)
class OpTask:
    """The kernel task whose candidates implement an engine op."""

    task: str  # the task's (base) name, evokernel.tasks
    entry: str  # the function a candidate defines
    pack: bool  # kernel packs carry programs for it, chosen per context bucket


# The one op <-> task registry: candidate ops (OpSet.with_candidate), the ops a kernel pack
# may replace (engine/packs/format.py) and the tasks `tune` searches (evokernel.tasks
# `engine_tasks`) all come from here; each task names its op (`Task.op`), checked against it.
# `decode_layer` is op, task and entry point at once; the two op tasks keep the names of the
# interfaces they were published with.
OP_TASKS: dict[str, OpTask] = {
    "decode_attention": OpTask("gqa_decode_attention", "attention", pack=False),
    "linear": OpTask("decode_linear", "linear", pack=False),
    "decode_layer": OpTask("decode_layer", "decode_layer", pack=True),
}


def seed_path(op_name: str) -> Path:
    """Where the task seed implementing `op_name` lives (it may not exist yet)."""
    return SEEDS_DIR / OP_TASKS[op_name].task / "seed.py"


def entry_point(op_name: str) -> str:
    """The function a candidate for `op_name` must define."""
    return OP_TASKS[op_name].entry if op_name in OP_TASKS else op_name


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
