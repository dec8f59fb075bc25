"""Shared paths and helpers of the evaluator tests.

Candidates are files: hostile/ holds one per attack (its docstring says the expected reason),
honest/ the honest ones, isolated/ functions for run_isolated. Every test uses real worker
processes; nothing of the sandbox is mocked.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from evokernel.evaluate.process.pool import POOL
from evokernel.evaluate.process.procs import snapshot

HERE = Path(__file__).parent
HOSTILE = HERE / "hostile"
HONEST = HERE / "honest"
ISOLATED = HERE / "isolated"


def descendants(root: int | None = None) -> list[int]:
    """Live processes below `root` (default: this test process), once the warm pool's idle
    workers (the evaluator's own, waiting for their candidate) are closed."""
    POOL.drain()
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


PLACEHOLDER = "evokernel-mark"


def marked_copy(source: Path, directory: Path) -> tuple[Path, str]:
    """A copy of a candidate file whose marker string (PLACEHOLDER, the name its long-lived
    processes give themselves as argv[0]) is made unique, and that marker."""
    token = f"evokernel-mark-{uuid.uuid4().hex[:12]}"
    path = directory / source.name
    path.write_text(source.read_text().replace(PLACEHOLDER, token))
    return path, token


def marked_processes(token: str) -> list[int]:
    """Live processes anywhere on the machine whose command line holds `token` (a process
    inside a PID namespace has another pid there: only its command line is comparable)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if token.encode() in cmdline and pid_alive(int(name)):
            found.append(int(name))
    return found
