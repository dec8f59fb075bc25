"""The `local` backend: evaluations on this machine, workers over the visible GPUs (or CPU slots).

Worker i (0 <= i < workers) takes one evaluation at a time and runs it on GPU i mod the number
of visible GPUs (`problem.evaluate(code, gpu=...)`, which passes `evaluate(..., gpu=...)` on
to the evaluator), in the evaluator's own killable, sandboxed process. A worker is a daemon
thread of this process holding a worker index: the index, not the thread, names the GPU, so
two evaluations never share an index at once.

On `--device cpu` there is no GPU: workers are CPU slots (`evaluator.workers`, 1 by default).
An exception from the evaluator's own code (never the candidate's: its failures are results)
is an infrastructure fault, re-queued on the same worker at most `max_retries` times.

`close()` with evaluations still running (an interrupted or failed session) stops them: it
kills their worker processes and waits, at most `DRAIN_S`, for their threads to return, so each
evaluation removes its scratch directories itself; nothing new starts after `close()`.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from evokernel.errors import EvokernelError
from evokernel.evolve.backends.base import BackendError, Evaluation, fault_line, lost_result
from evokernel.evolve.threads import DaemonThreads

if TYPE_CHECKING:
    from evokernel.evolve.problem import Problem


DRAIN_S = 10.0  # how long close() waits for interrupted evaluations to clean up


class LocalBackend:
    name = "local"

    def __init__(self, workers: int, gpus: int, max_retries: int = 2):
        """`workers` evaluations at once over `gpus` visible GPUs (0: CPU slots)."""
        self.workers = max(1, workers)
        self.gpus = gpus
        self.max_retries = max_retries
        self._threads = DaemonThreads(self.workers, "evaluate")
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(self.workers):
            self._free.put(i)
        self._closing = False
        self._busy = 0
        self._idle = threading.Condition()

    def describe(self) -> str:
        where = f"{self.gpus} GPU(s)" if self.gpus else "CPU"
        return f"local backend: {self.workers} worker(s) on {where}"

    def gpu_of(self, worker: int) -> int | None:
        return worker % self.gpus if self.gpus else None

    def submit(
        self, problem: Problem, code: str, promote_above: float | None = None
    ) -> Future[Evaluation]:
        return self._threads.submit(self._run, problem, code, promote_above)

    def _run(self, problem: Problem, code: str, promote_above: float | None) -> Evaluation:
        with self._idle:
            if self._closing:
                raise BackendError("the backend is closed")
            self._busy += 1
        try:
            return self._evaluate(problem, code, promote_above)
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _evaluate(self, problem: Problem, code: str, promote_above: float | None) -> Evaluation:
        # One thread per worker index, so an index is always free when a thread starts.
        worker = self._free.get()
        try:
            gpu = self.gpu_of(worker)
            where = {"backend": self.name, "worker": worker, "gpu": gpu}
            faults: list[str] = []
            for attempt in range(1, self.max_retries + 2):
                t0 = time.monotonic()
                try:
                    result = problem.evaluate(code, gpu=gpu or 0, promote_above=promote_above)
                except EvokernelError as err:
                    raise BackendError(str(err)) from None
                except Exception as err:
                    faults.append(fault_line(err))
                    continue
                return Evaluation(result, time.monotonic() - t0, where, attempt, faults)
            return Evaluation(lost_result(problem.name, faults), 0.0, where, len(faults), faults)
        finally:
            self._free.put(worker)

    def close(self) -> None:
        """Stop what still runs (see the module docstring); idle daemon threads cost nothing."""
        with self._idle:
            self._closing = True
            if not self._busy:
                return
        from evokernel.evaluate.process.launch import abort_all
        from evokernel.reasons import reason

        deadline = time.monotonic() + DRAIN_S
        line = reason("infrastructure", "the search stopped during this evaluation")
        while time.monotonic() < deadline:
            abort_all(line)  # again each round: a stage may have started a new process
            with self._idle:
                if self._busy:
                    self._idle.wait(timeout=0.2)
                if not self._busy:
                    return
