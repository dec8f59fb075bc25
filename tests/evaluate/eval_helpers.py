"""Shared paths and helpers of the evaluator tests.

Candidates are files: hostile/ holds one per attack (its docstring says the expected reason),
honest/ the honest ones, isolated/ functions for run_isolated. Every test uses real worker
processes; nothing of the sandbox is mocked.
"""

from __future__ import annotations

import os
from pathlib import Path

from evokernel.evaluate.procs import snapshot

HERE = Path(__file__).parent
HOSTILE = HERE / "hostile"
HONEST = HERE / "honest"
ISOLATED = HERE / "isolated"


def descendants(root: int | None = None) -> list[int]:
    """Live processes below `root` (default: this test process)."""
    root = os.getpid() if root is None else root
    table = snapshot()
    children: dict[int, list[int]] = {}
    for st in table.values():
        if st.state != "Z":
            children.setdefault(st.ppid, []).append(st.pid)
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def pid_alive(pid: int) -> bool:
    st = snapshot().get(pid)
    return st is not None and st.state != "Z"


def read_pids(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split() if line.strip()]
