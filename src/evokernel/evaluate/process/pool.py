"""A warm pool: sandboxed workers that finished their trusted set-up before a candidate arrives.

Start-up (torch, Triton, the CUDA context, warm-up kernels, the guards' snapshot) is most of a
small evaluation's cost and none of it depends on the candidate, so it is done ahead of time,
off the critical path. Each worker is still fresh and still serves one candidate only:
`lease(spec)` hands a ready worker out of the pool for good (the caller closes it; nothing
ever puts it back), and the pool starts a replacement.

* Start-up is two requests (protocol.Init, then protocol.Warm): the imports and the host-side
  device set-up (CUDA context, compiles, CUPTI: seconds, no GPU work) run freely; the device
  part (warm-up kernels, baselines, the spin rate: under a second) holds the device's shared
  lock (locks.py), so a worker starting ahead never runs GPU work while a candidate is timed.
  On a GPU, a Warm per public scenario comes first: the baselines' first calls on the timed
  shapes, where libraries set up per shape (cuDNN's SDPA: up to 1.4 s each), each its own
  short hold, so that set-up is paid by a spare and not inside an evaluation.
* Interchangeable workers share a `Spec` (mode, task, device, dtype, limits, GPU, threads).
* A worker that died or hung before it was handed out never reaches a candidate: a dead one
  is seen at `lease` and replaced; a hung start-up hits its start-up limit and is replaced
  (the caller retries: not the candidate's fault); an idle worker expires after `IDLE_S`.
  A worker that hangs after it was handed out but before it acknowledges the candidate
  (`protocol.Loading`) is the caller's to detect, with a short limit of its own.
* How many: none ahead of the first lease of a spec (a one-off `evokernel eval` pays no spare);
  from the second on, after each hand-out, twice as many ready or starting as leases are
  running at once (a start-up, ~12 s on an H100 host, is longer than a small evaluation: one
  spare per lease falls behind), at most `capacity()`: half the machine's cores, at most 8
  (start-up is CPU work, and a CUDA spare holds a context). `api.default_workers` sizes the
  evaluations in flight the same way.
* `compile_cache`: after a worker's trusted set-up, and before any candidate code ran in it,
  the Triton binaries it built (launchers, the warm-up kernels) go to the shared cache.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

from evokernel.evaluate import protocol as p
from evokernel.evaluate.locks import slot_of
from evokernel.evaluate.process import compile_cache, policy
from evokernel.evaluate.process.launch import WorkerGone, WorkerProcess
from evokernel.reasons import reason

IDLE_S = 300.0
SPARES_PER_LEASE = 2
_MAX_TRIES = 4


def capacity() -> int:
    """Ready workers kept per spec at most: half the machine's cores, 1 to 8."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


@dataclass(frozen=True)
class Spec:
    """What makes two workers interchangeable."""

    mode: str  # "eval" | "calibrate"
    task: str
    device: str
    dtype: str
    device_memory_mb: int
    threads: int
    memory_mb: int
    disk_mb: int
    cuda_visible: str | None
    startup_timeout_s: float
    warm_scenarios: tuple[str, ...] = ()  # CUDA: public scenarios whose baselines start-up calls

    def init(self) -> p.Init:
        return p.Init(
            mode=self.mode, task=self.task, device=self.device, dtype=self.dtype,
            device_memory_mb=self.device_memory_mb, threads=self.threads,
        )  # fmt: skip


class StartFailed(Exception):
    """A worker could not be made ready (the infrastructure's fault); `line` says why."""

    def __init__(self, line: str, detail: str = "") -> None:
        super().__init__(line)
        self.line, self.detail = line, detail


@dataclass
class ReadyWorker:
    """A worker through its trusted set-up, never handed a candidate yet."""

    process: WorkerProcess
    ready: p.Ready
    facts: p.DeviceFacts | None

    def alive(self) -> bool:
        return self.process.proc.poll() is None and self.process.verdict is None


def start(spec: Spec) -> ReadyWorker:
    """A new worker through its trusted set-up; StartFailed when it does not get there. A CUDA
    worker reads the shared compile cache and, once ready, gives it what it compiled."""
    cache = compile_cache.shared() if spec.device == "cuda" else None
    worker = WorkerProcess(
        device=spec.device,
        memory_mb=spec.memory_mb,
        disk_mb=spec.disk_mb,
        env=cache.worker_env() if cache else None,
        cuda_visible=spec.cuda_visible,
        threads=spec.threads,
        read=cache.read_paths() if cache else (),
    )
    try:
        worker.set_deadline(
            spec.startup_timeout_s, reason("infrastructure", "worker start-up timed out")
        )
        reply = worker.request(spec.init(), (p.Ready, p.Error))
        if isinstance(reply, p.Error):
            _set_up_failed(reply, reply.sandbox, spec)
        assert isinstance(reply, p.Ready)
        device_slot = slot_of(spec.device, spec.cuda_visible)
        for name in spec.warm_scenarios:  # one short hold each, before the final Warm
            with device_slot.shared():
                shaped = worker.request(p.Warm(scenario=name), (p.Warmed, p.Error))
            if isinstance(shaped, p.Error):
                _set_up_failed(shaped, reply.sandbox, spec)
        with device_slot.shared():
            warmed = worker.request(p.Warm(), (p.Warmed, p.Error))
        if isinstance(warmed, p.Error):
            _set_up_failed(warmed, reply.sandbox, spec)
        assert isinstance(warmed, p.Warmed)
        worker.clear_deadline()
        if cache is not None:  # only trusted code has run in it so far
            cache.keep_trusted(worker.dir)
    except WorkerGone as gone:
        worker.close()
        raise StartFailed(f"worker start-up failed: {gone.line}") from None
    except BaseException:
        worker.close()
        raise
    return ReadyWorker(worker, reply, warmed.device)


def _set_up_failed(error: p.Error, layers: list[str], spec: Spec) -> None:
    policy.note_setup_failure(layers, spec.device, error.detail)
    detail = error.detail.strip().splitlines()[-1:] or [""]
    raise StartFailed(f"worker set-up failed: {detail[0][-300:]}", error.detail)


class WarmPool:
    """Ready workers per spec. One per process (`POOL`); thread-safe."""

    def __init__(self, starter: Callable[[Spec], ReadyWorker]) -> None:
        self._starter = starter
        self._ready: dict[Spec, deque[Future[ReadyWorker]]] = {}
        self._leases: dict[Spec, int] = {}
        self._running: dict[Spec, int] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _start_async(self, spec: Spec) -> Future[ReadyWorker]:
        future: Future[ReadyWorker] = Future()

        def run() -> None:
            try:
                warm = self._starter(spec)
            except BaseException as err:
                future.set_exception(err)
                return
            if self._closed:
                warm.process.close()
                future.set_exception(StartFailed("the pool was shut down"))
                return
            # An idle worker does not wait forever: it expires and is replaced when taken.
            warm.process.set_deadline(
                IDLE_S, reason("infrastructure", "an idle pool worker expired")
            )
            future.set_result(warm)

        threading.Thread(target=run, name="evokernel-pool", daemon=True).start()
        return future

    def _replenish(self, spec: Spec) -> None:
        """Keep twice as many workers ready (or starting) as leases run at once, within
        capacity; none before a spec's second lease."""
        with self._lock:
            if self._closed or self._leases.get(spec, 0) < 2:
                return
            queue = self._ready.setdefault(spec, deque())
            want = min(capacity(), SPARES_PER_LEASE * self._running.get(spec, 0))
            while len(queue) < want:
                queue.append(self._start_async(spec))

    def take(self, spec: Spec) -> ReadyWorker:
        """A ready worker, never handed out before. StartFailed after repeated start-up
        failures."""
        last: StartFailed | None = None
        for _ in range(_MAX_TRIES):
            with self._lock:
                queue = self._ready.get(spec)
                future = queue.popleft() if queue else None
            if future is None:
                future = self._start_async(spec)
            try:
                warm = future.result()
            except StartFailed as err:
                last = err
                continue
            if warm.alive():
                warm.process.clear_deadline()
                return warm
            warm.process.close()  # died while idle: replaced, nobody is blamed
        raise last or StartFailed("no worker could be started")

    @contextmanager
    def lease(self, spec: Spec) -> Iterator[ReadyWorker]:
        """`with pool.lease(spec) as warm:` a fresh ready worker for one candidate; the caller
        closes `warm.process` (the pool never takes it back). Once it is handed out, the pool
        starts the next one(s) ahead."""
        with self._lock:
            self._leases[spec] = self._leases.get(spec, 0) + 1
            self._running[spec] = self._running.get(spec, 0) + 1
        try:
            warm = self.take(spec)
            self._replenish(spec)
            yield warm
        finally:
            with self._lock:
                self._running[spec] -= 1

    def waiting(self) -> list[ReadyWorker]:
        """The ready workers waiting in the pool now (for diagnostics and tests)."""
        with self._lock:
            futures = [f for queue in self._ready.values() for f in queue]
        return [f.result() for f in futures if f.done() and f.exception() is None]

    def drain(self) -> None:
        """Close every worker waiting in the pool, after those still starting are ready; the
        pool starts new ones on later leases."""
        with self._lock:
            futures = [f for queue in self._ready.values() for f in queue]
            self._ready.clear()
        for future in futures:
            with contextlib.suppress(StartFailed):
                future.result().process.close()

    def shutdown(self) -> None:
        """Close every worker still waiting in the pool; start no more."""
        with self._lock:
            self._closed = True
            futures = [f for queue in self._ready.values() for f in queue]
            self._ready.clear()
        for future in futures:
            future.add_done_callback(_close_started)  # runs now when already done


def _close_started(future: Future[ReadyWorker]) -> None:
    if future.exception() is None:
        future.result().process.close()


POOL = WarmPool(start)
atexit.register(POOL.shutdown)
