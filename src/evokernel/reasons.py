"""Reason lines: why a candidate was rejected, one line each, `"<code>: <detail>"`.

`<code>` is one of `REASON_CODES`; tests and the search match on the code, people read the
detail. Tasks write them (`Task.observe` names a wrong output's kind) and the evaluator
(evokernel.evaluate) writes the rest, so they live here, below both (and import nothing: the
search's light modules read results without torch).
"""

from __future__ import annotations

REASON_CODES: dict[str, str] = {
    # before anything runs
    "static": "rejected before any process: size, encoding, syntax, markers, forbidden construct",
    "load": "importing the candidate failed, or it lacks the entry point",
    # the process
    "timeout": "the candidate exceeded its wall-clock limit; its process group was killed",
    "crashed": "the worker died from a signal or exited without a result",
    "no-result": "the worker exited normally but sent no result over the private channel",
    "memory-budget": "the candidate exceeded its host or device memory budget",
    "cuda-error": "a CUDA error (e.g. illegal address); the worker was discarded",
    "exception": "the candidate raised an exception",
    # the output
    "output-type": "the result is not exactly a torch.Tensor (subclass or other type)",
    "output-shape": "the result has the wrong shape",
    "output-dtype": "the result has the wrong dtype",
    "output-device": "the result is on the wrong device",
    "not-finite": "the result holds NaN or Inf (often unwritten, poisoned memory)",
    "mismatch": "the result differs from the reference beyond the tolerance",
    "nondeterministic": "two calls on the same inputs disagreed",
    "input-mutated": "the candidate changed its inputs",
    "cache-write": "the candidate wrote an in-place output (the KV cache) outside its region",
    "graph-capture": "the candidate could not be captured in a CUDA graph (a host sync...)",
    "timed-output-mismatch": "an output produced during timing differs from the reference",
    # tampering
    "patched": "the candidate replaced a function the harness relies on (timer, comparator)",
    "thread": "the candidate left a thread running or started one during a call",
    "process": "the candidate started a process that was still running after its call",
    "side-stream": "the candidate's work ran on a stream other than the launching stream",
    "timer-mismatch": "event time and synchronized host time disagree (work escaped the stream)",
    "kernels-missing": "the profiler did not see the candidate's own kernels do the work",
    "infrastructure": "the evaluator itself failed (not the candidate's fault)",
    "budget": "not evaluated: the batch's time budget ran out (not the candidate's fault)",
}


def reason(code: str, detail: str) -> str:
    """Format a reason line; `code` must be a key of REASON_CODES."""
    if code not in REASON_CODES:
        raise ValueError(f"unknown reason code {code!r}")
    detail = " ".join(str(detail).split())  # one line
    return f"{code}: {detail}"


def reason_code(line: str) -> str:
    return line.split(":", 1)[0].strip()
