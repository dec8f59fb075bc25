"""Kernel tasks by name: `get_task(name)` and `all_tasks()`.

A task is a named problem a candidate file solves (`evokernel.tasks.base.Task`): an interface,
a float64 reference, seeded public and hidden scenarios, tolerances per dtype, stock baselines
and a roofline byte count. Each task lives in `evokernel.tasks.<name>` with a `task()` factory
and a seed candidate (`seed.py`). A task at a model shape (`decode_layer`) also takes a shape
suffix, `decode_layer@H2048-Hq16-Hkv8-D128-I6144`, which its module's `task(spec)` parses.
Task modules import torch only (never Triton), so the evaluator's parent process can load them
before it decides the Triton mode.

Each task names the engine op its candidates implement (`Task.op`), checked against the one op
<-> task registry (ops/candidates.py `OP_TASKS`); `engine_tasks(cfg)` derives from it the tasks
`tune` searches for a checkpoint: each pack-carried op's task at the checkpoint's shape (a
shaped task's module names it: `name_for(cfg)`).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from evokernel.errors import TaskError
from evokernel.ops.candidates import OP_TASKS
from evokernel.tasks.base import Task

if TYPE_CHECKING:
    from evokernel.model.config import ModelConfig

# name -> module holding `task() -> Task`; order is the listing order.
_MODULES = {
    "gqa_decode_attention": "evokernel.tasks.gqa_decode_attention.task",
    "decode_linear": "evokernel.tasks.decode_linear.task",
}
# Tasks at a model shape: `name` is the default shape, `name@SPEC` another (the module's
# `task(spec)` parses SPEC); not listed by `all_tasks`.
_SHAPED = {
    "decode_layer": "evokernel.tasks.decode_layer.task",
}

TASK_NAMES: tuple[str, ...] = tuple(_MODULES)
SHAPED_TASKS: tuple[str, ...] = tuple(_SHAPED)


@cache
def get_task(name: str) -> Task:
    """The task named `name` (`decode_layer@SPEC`: at another shape); raises `TaskError`
    listing the known names."""
    base, at, spec = name.partition("@")
    if base in _SHAPED:
        made = importlib.import_module(_SHAPED[base]).task(spec if at else None)
        assert isinstance(made, Task) and made.name == name, f"{base} must build {name}"
        return _checked(made, base)
    module = _MODULES.get(name)
    if module is None:
        if at and base in _MODULES:
            raise TaskError(f"task {base!r} takes no shape suffix ({name!r})")
        known = ", ".join(TASK_NAMES + SHAPED_TASKS)
        raise TaskError(f"unknown task {name!r} (known: {known})")
    made = importlib.import_module(module).task()
    assert isinstance(made, Task) and made.name == name, f"{module}.task() must build {name}"
    return _checked(made, name)


def _checked(task: Task, base: str) -> Task:
    if task.op is not None:
        entry = OP_TASKS[task.op]
        assert (entry.task, entry.entry) == (base, task.entry_point), f"{base}: OP_TASKS entry"
    return task


def all_tasks() -> list[Task]:
    return [get_task(name) for name in TASK_NAMES]


def engine_tasks(cfg: ModelConfig) -> list[str]:
    """The tasks whose winners a kernel pack carries for the engine, at `cfg`'s shapes. None
    for a quantized checkpoint: the tasks' programs take dense projections (`tune` measures
    the packed kernels' launch choices instead, tune/quant.py)."""
    if cfg.quantization is not None:
        return []
    names = []
    for entry in OP_TASKS.values():
        if not entry.pack:
            continue
        if entry.task in _SHAPED:
            names.append(importlib.import_module(_SHAPED[entry.task]).name_for(cfg))
        else:
            names.append(entry.task)
    return names


__all__ = ["SHAPED_TASKS", "TASK_NAMES", "TaskError", "all_tasks", "engine_tasks", "get_task"]
