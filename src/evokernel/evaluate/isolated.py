"""`run_isolated`: the evaluator's sandbox for any function in any file.

The search uses it for OpenEvolve-style tasks whose evaluator is `evaluate(path) -> dict`:
the function runs in a fresh spawned interpreter in its own session, with a wall-clock limit
(then SIGTERM/SIGKILL to every process it started), a host-memory budget and a private working
directory; arguments and the result travel as JSON over the private channel (never stdout).
Exceptions, crashes, timeouts and non-JSON results become `ok=False` with a reason line.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evokernel.errors import EvokernelError
from evokernel.evaluate.result import reason
from evokernel.evaluate.sandbox import Worker, WorkerGone


@dataclass
class SandboxOutcome:
    ok: bool
    value: Any = None  # the function's JSON result when ok
    reason: str | None = None  # a reason line ("timeout: ...", "crashed: ...") when not ok
    wall_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    traceback: str = ""


def run_isolated(
    path: str | Path,
    function: str = "evaluate",
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
    memory_mb: int = 4096,
    disk_mb: int = 1024,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
) -> SandboxOutcome:
    """Call `function(*args, **kwargs)` from the file at `path` in a sandboxed process."""
    file = Path(path)
    if not file.is_file():
        raise EvokernelError(f"file not found: {file}")
    if timeout_s <= 0 or memory_mb <= 0:
        raise EvokernelError("run_isolated: timeout_s and memory_mb must be positive")
    start = time.monotonic()
    worker = Worker(
        device=None,
        memory_mb=memory_mb,
        disk_mb=disk_mb,
        env=env,
        cwd=str(cwd) if cwd is not None else None,
    )
    outcome = SandboxOutcome(ok=False)
    try:
        worker.set_deadline(
            timeout_s, reason("timeout", f"no result within {timeout_s:g} s; process group killed")
        )
        ready = worker.request({"op": "init", "mode": "call"})
        if ready.get("op") != "ready":
            outcome.reason = reason("infrastructure", str(ready.get("detail", ready))[-300:])
        else:
            message = {
                "op": "call",
                "path": str(file.resolve()),
                "function": function,
                "args": list(args),
                "kwargs": dict(kwargs or {}),
            }
            reply = worker.request(message)
            if "error" in reply:
                outcome.reason = reason("exception", str(reply["error"])[:500])
                outcome.traceback = "".join(str(x) for x in reply.get("traceback", []))
            else:
                outcome.ok, outcome.value = True, reply.get("value")
    except WorkerGone as gone:
        outcome.reason = gone.line
    finally:
        tails = worker.close()
        outcome.stdout_tail, outcome.stderr_tail = tails["stdout_tail"], tails["stderr_tail"]
        outcome.wall_s = time.monotonic() - start
    return outcome
