"""`run_isolated`: the evaluator's sandbox for any function in any file.

The search uses it for OpenEvolve-style tasks whose evaluator is `evaluate(path) -> dict`:
the function runs in a fresh spawned interpreter in its own session and in the same OS sandbox
as a kernel candidate (process/: no writes outside its scratch directory, no network, a
scrubbed environment, nothing it starts outlives it), with a wall-clock limit (then
SIGTERM/SIGKILL to every process it started), a host-memory budget and a private working
directory; arguments and the result travel as JSON over the private channel (never stdout).
Exceptions, crashes, timeouts and non-JSON results become `ok=False` with a reason line.

Besides the system, Python and the source tree, the function may read the file's directory,
`cwd`, `read_paths` and every string argument that names an existing file or directory; it may
write only its scratch directory (its TMPDIR, HOME and working directory unless `cwd` is
given) and `write_paths`. Text that comes back (the value's strings, the error, the traceback,
the output tails) has values of the caller's environment that the process was not given cut
out, and is capped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evokernel.errors import EvokernelError
from evokernel.evaluate import protocol as p
from evokernel.evaluate.process import policy
from evokernel.evaluate.process.launch import WorkerGone, WorkerProcess
from evokernel.evaluate.process.policy import require_isolation
from evokernel.reasons import reason


@dataclass
class SandboxOutcome:
    ok: bool
    value: Any = None  # the function's JSON result when ok
    reason: str | None = None  # a reason line ("timeout: ...", "crashed: ...") when not ok
    wall_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    traceback: str = ""
    sandbox: str = ""  # the isolation layers the process ran under


def _path_args(values: Sequence[Any]) -> tuple[str, ...]:
    """String arguments that name existing files or directories (readable in the sandbox)."""
    found = []
    for value in values:
        if isinstance(value, str) and 0 < len(value) < 4096 and os.path.exists(value):
            found.append(os.path.abspath(value))
    return tuple(found)


def _redacted(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        return policy.redact(value, env)
    if isinstance(value, list):
        return [_redacted(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _redacted(v, env) for k, v in value.items()}
    return value


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
    read_paths: Sequence[str | Path] = (),
    write_paths: Sequence[str | Path] = (),
    allow_unsandboxed: bool = False,
) -> SandboxOutcome:
    """Call `function(*args, **kwargs)` from the file at `path` in a sandboxed process.
    `env` adds variables to the process's (otherwise scrubbed) environment."""
    file = Path(path)
    if not file.is_file():
        raise EvokernelError(f"file not found: {file}")
    if timeout_s <= 0 or memory_mb <= 0:
        raise EvokernelError("run_isolated: timeout_s and memory_mb must be positive")
    require_isolation(allow_unsandboxed)
    start = time.monotonic()
    values = [*args, *(kwargs or {}).values()]
    readable = (str(file.resolve().parent), *map(str, read_paths), *_path_args(values))
    worker = WorkerProcess(
        device=None,
        memory_mb=memory_mb,
        disk_mb=disk_mb,
        env=env,
        cwd=str(cwd) if cwd is not None else None,
        read=readable,
        write=tuple(str(p) for p in write_paths),
    )
    outcome = SandboxOutcome(ok=False)
    try:
        worker.set_deadline(
            timeout_s, reason("timeout", f"no result within {timeout_s:g} s; process group killed")
        )
        ready = worker.request(p.Init(mode="call"), (p.Ready, p.Error))
        outcome.sandbox = ", ".join(ready.sandbox)
        isolation = policy.Isolation(tuple(ready.sandbox))
        if isinstance(ready, p.Error):
            outcome.reason = reason("infrastructure", ready.detail[-300:])
        elif not isolation.isolated and not allow_unsandboxed:
            outcome.reason = reason("infrastructure", f"the process's {isolation.line}")
        else:
            request = p.Call(
                path=str(file.resolve()), function=function, args=list(args),
                kwargs=dict(kwargs or {}),
            )  # fmt: skip
            reply = worker.request(request, (p.Called, p.Error))
            if isinstance(reply, p.Error):
                outcome.reason = reason("infrastructure", reply.detail[-300:])
            elif reply.error is not None:
                error = policy.redact(reply.error[:500], worker.env)
                outcome.reason = reason("exception", error)
                trace = "".join(reply.traceback)[-4000:]
                outcome.traceback = policy.redact(trace, worker.env)
            else:
                outcome.ok, outcome.value = True, _redacted(reply.value, worker.env)
    except WorkerGone as gone:
        outcome.reason = gone.line
    finally:
        tails = worker.close()
        outcome.stdout_tail, outcome.stderr_tail = tails["stdout_tail"], tails["stderr_tail"]
        outcome.wall_s = time.monotonic() - start
    return outcome
