"""Kernel tasks by name: `get_task(name)` and `all_tasks()`.

A task is a named problem a candidate file solves (`evokernel.tasks.base.Task`): an interface,
a float64 reference, seeded public and hidden scenarios, tolerances per dtype, stock baselines
and a roofline byte count. Each task lives in `evokernel.tasks.<name>` with a `task()` factory
and a seed candidate (`seed.py`). Task modules import torch only (never Triton), so the
evaluator's parent process can load them before it decides the Triton mode.
"""

from __future__ import annotations

import importlib
from functools import cache

from evokernel.errors import TaskError
from evokernel.tasks.base import Task

# name -> module holding `task() -> Task`; order is the listing order.
_MODULES = {
    "gqa_decode_attention": "evokernel.tasks.gqa_decode_attention.task",
    "decode_linear": "evokernel.tasks.decode_linear.task",
}

TASK_NAMES: tuple[str, ...] = tuple(_MODULES)


@cache
def get_task(name: str) -> Task:
    """The task named `name`; raises `TaskError` listing the known names."""
    module = _MODULES.get(name)
    if module is None:
        known = ", ".join(TASK_NAMES)
        raise TaskError(f"unknown task {name!r} (known: {known})")
    made = importlib.import_module(module).task()
    assert isinstance(made, Task) and made.name == name, f"{module}.task() must build {name}"
    return made


def all_tasks() -> list[Task]:
    return [get_task(name) for name in TASK_NAMES]


__all__ = ["TASK_NAMES", "TaskError", "all_tasks", "get_task"]
