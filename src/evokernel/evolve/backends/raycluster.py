"""The `ray` backend: evaluations run by Ray actors, each pinned to one GPU (or one CPU) of a
cluster.

    pip install 'evokernel[ray]'         # on the driver and on every node of the cluster
    evokernel evolve ... --backend ray [--ray-address ray://HEAD:10001]

Connecting (`backend.address`, or `--ray-address`): "HOST:PORT" joins a running cluster as a
driver, "ray://HOST:PORT" through Ray Client, "auto" the cluster this machine is part of; none
takes Ray's default: the cluster named by `RAY_ADDRESS`, else a new local one started on this
machine (its GPUs and CPUs) and shut down when the run ends. Ray is imported only here, and
only when this backend is chosen.

Workers: at start the backend makes one actor per evaluation it runs at once (`workers`,
default and at most one per GPU of the cluster on cuda, one per CPU on cpu), each with
`num_gpus=1` (`num_cpus=1` on cpu): Ray places it on a node with a free GPU and makes that GPU
the only one it sees, for its whole life. An actor, not a task per evaluation, because the
evaluator keeps per-GPU state in its process (the warm pool of sandboxed workers, the GPU's
calibration, a CUDA context for the references): a Ray task worker is reused for tasks on
other GPUs, and every change of GPU would pay that state again. GPUs that join the cluster
later are not used by a running search.

One evaluation: the driver turns the program into an `EvalJob` (JSON: the source and the
evaluator settings) and calls the least busy actor's `evaluate`, which calls `jobs.run_job`:
that runs the candidate through `evokernel.evaluate` in its own killable, sandboxed process
inside the actor and returns the `EvalResult` JSON. The run's database, the mutators and every
random choice stay on the driver. The first job of a run (the seed's, which the search
evaluates alone) also goes to every other actor as a warm-up whose result is dropped: each
actor's cold start (imports, its pool of sandboxed workers, its GPU's calibration) then
overlaps the seed's evaluation instead of the first iterations.

Faults: Ray's own retries of a call are off (`max_task_retries=0`) so that this module counts
them; Ray restarts a dead actor (`max_restarts=-1`). A call whose actor process or node died (or
that Ray's memory monitor killed) is sent again, at most `max_retries` times, then given up as
an `infrastructure` result. A task that
failed because the worker cannot run jobs at all (evokernel missing or another version,
the evaluator file missing, no GPU where one was asked for) raises `BackendError`; so does
losing the connection to the cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evokernel.evolve.backends.base import BackendError, Evaluation, fault_line, lost_result

if TYPE_CHECKING:
    from evokernel.evolve.jobs import EvalJob
    from evokernel.evolve.problem import Problem

INSTALL = "pip install 'evokernel[ray]'"
# Failures no re-queue can cure: the worker's set-up, not one evaluation.
_FATAL = ("RuntimeEnvSetupError", "LocalRayletDiedError", "AuthenticationError")


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BackendError(f"the ray backend needs Ray on this machine: {INSTALL}") from None
    return ray


def probe(address: str | None, timeout_s: float = 10.0) -> None:
    """Fail fast, in one line, when `address` ("HOST:PORT" or "ray://HOST:PORT") does not
    answer: Ray itself keeps retrying an unreachable cluster for minutes."""
    if not address or address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise BackendError(f"Ray address {address!r} is not HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise BackendError(
            f"cannot reach the Ray cluster at {address}: {err.strerror or err}"
        ) from None


class _Evaluator:
    """The Ray actor: evaluates jobs one at a time on the GPU Ray gave it."""

    def evaluate(self, job_json: str) -> str:
        """One job on this process's (only) visible GPU; the result as JSON."""
        import ray

        from evokernel.evolve.jobs import EvalJob, run_job

        t0 = time.monotonic()
        result = run_job(EvalJob.from_json(job_json), gpu=0)
        return json.dumps(
            {
                "result": result.to_json(),
                "wall_s": time.monotonic() - t0,
                "node": ray.util.get_node_ip_address(),
                "gpu": ",".join(str(g) for g in ray.get_gpu_ids()) or None,
            }
        )


@dataclass
class _Task:
    job: EvalJob
    future: Future[Evaluation]
    faults: list[str] = field(default_factory=list)


class RayBackend:
    name = "ray"

    def __init__(self, device: str, address: str | None, workers: int = 0, max_retries: int = 2):
        ray = import_ray()
        self.ray = ray
        self.device = device
        self.max_retries = max_retries
        self._owned = not ray.is_initialized()  # shut down at close only what we started
        if self._owned:
            probe(address)
            try:
                ray.init(
                    address=address,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    include_dashboard=False,
                )
            except Exception as err:
                where = address or os.environ.get("RAY_ADDRESS") or "a new local cluster"
                raise BackendError(f"cannot start Ray ({where}): {fault_line(err)}") from None
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        if device == "cuda" and gpus == 0:
            self.close()
            raise BackendError("the Ray cluster has no GPU; use --device cpu, or add GPU nodes")
        self.address = address or os.environ.get("RAY_ADDRESS") or "local"
        self.cluster = (gpus, cpus, len([n for n in ray.nodes() if n.get("Alive")]))
        slots = max(1, gpus if device == "cuda" else cpus)
        self.workers = min(workers, slots) if workers else slots
        per_actor = {"num_gpus": 1, "num_cpus": 1} if device == "cuda" else {"num_cpus": 1}
        actor = ray.remote(_Evaluator).options(max_restarts=-1, max_task_retries=0, **per_actor)
        self._actors = [actor.remote() for _ in range(self.workers)]
        self._warm_ups: list[Any] = []  # refs of the first job's copies (results dropped)
        self._warmed = self.workers == 1
        self._pending: dict[Any, tuple[_Task, int]] = {}  # call -> (task, actor index)
        self._lock = threading.Lock()
        self._closed = False
        self._monitor = threading.Thread(target=self._loop, name="ray-results", daemon=True)
        self._monitor.start()

    def describe(self) -> str:
        gpus, cpus, nodes = self.cluster
        return (
            f"ray backend: {self.address}, {nodes} node(s), {gpus} GPU(s), {cpus} CPU(s); "
            f"{self.workers} evaluation(s) at once"
        )

    def submit(
        self, problem: Problem, code: str, promote_above: float | None = None
    ) -> Future[Evaluation]:
        future: Future[Evaluation] = Future()
        future.set_running_or_notify_cancel()
        task = _Task(problem.job(code, promote_above), future)
        self._send(task)
        with self._lock:
            if not self._warmed:
                self._warmed = True
                busy = self._load()
                job = task.job.to_json()
                for i, actor in enumerate(self._actors):
                    if not busy[i]:
                        with contextlib.suppress(Exception):  # only a warm-up
                            self._warm_ups.append(actor.evaluate.remote(job))
        return future

    def _send(self, task: _Task) -> None:
        with self._lock:
            load = self._load()
            index = min(range(self.workers), key=lambda i: load[i])
            try:
                ref = self._actors[index].evaluate.remote(task.job.to_json())
            except Exception as err:
                task.future.set_exception(BackendError(f"Ray refused a task: {fault_line(err)}"))
                return
            self._pending[ref] = (task, index)

    def _load(self) -> list[int]:
        """Calls sent to each actor and not finished yet (hold the lock)."""
        load = [0] * self.workers
        for _, index in self._pending.values():
            load[index] += 1
        return load

    # --- results, on the monitor thread --------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed:
            with self._lock:
                refs = list(self._pending)
            if not refs:
                time.sleep(0.05)
                continue
            try:
                ready, _ = self.ray.wait(refs, num_returns=1, timeout=0.5)
            except Exception as err:
                if not self._closed:
                    self._fail_all(BackendError(f"lost the Ray cluster: {fault_line(err)}"))
                return
            for ref in ready:
                with self._lock:
                    found = self._pending.pop(ref, None)
                if found is not None:
                    self._finish(ref, found[0])

    def _finish(self, ref: Any, task: _Task) -> None:
        try:
            out = json.loads(self.ray.get(ref))
        except Exception as err:
            fatal = self._fatal(err)
            if fatal:
                task.future.set_exception(BackendError(f"a Ray worker cannot evaluate: {fatal}"))
                return
            task.faults.append(fault_line(err))
            if len(task.faults) <= self.max_retries:
                self._send(task)  # re-queued: the worker or node died, not the candidate
            else:
                result = lost_result(task.job.name, task.faults)
                where = {"backend": self.name, "node": None, "gpu": None}
                task.future.set_result(
                    Evaluation(result, 0.0, where, len(task.faults), task.faults)
                )
            return
        from evokernel.evaluate.result import EvalResult

        where = {"backend": self.name, "node": out["node"], "gpu": out["gpu"]}
        task.future.set_result(
            Evaluation(
                EvalResult.from_json(out["result"]),
                float(out["wall_s"]),
                where,
                len(task.faults) + 1,
                task.faults,
            )
        )

    def _fatal(self, err: BaseException) -> str:
        """A one-line reason when `err` says the worker cannot run jobs at all, else ""."""
        from evokernel.errors import EvokernelError

        name = type(err).__name__
        cause = getattr(err, "cause", None)
        if isinstance(cause, (EvokernelError, ImportError)):
            return fault_line(cause)
        if "No module named 'evokernel" in str(err):
            return f"evokernel is not installed on a worker node ({INSTALL} there)"
        if any(n in name for n in _FATAL):
            return fault_line(err)
        return ""

    def _fail_all(self, err: BackendError) -> None:
        with self._lock:
            tasks, self._pending = [t for t, _ in self._pending.values()], {}
        for task in tasks:
            task.future.set_exception(err)

    def close(self) -> None:
        """Stop watching; tasks still running are cancelled (their evaluations are lost and
        redone on --resume); the connection this backend opened is closed, and with it a
        local cluster it started."""
        self._closed = True
        monitor = getattr(self, "_monitor", None)
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join(timeout=5)  # out of ray.wait before Ray is shut down under it
        pending = getattr(self, "_pending", {})
        for ref in [*pending, *getattr(self, "_warm_ups", [])]:
            # Already finished, or the cluster is gone: then there is nothing to stop.
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
        for actor in getattr(self, "_actors", []):
            # Their GPUs go back to the cluster now, not when this driver exits.
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        if self._owned and self.ray.is_initialized():
            self.ray.shutdown()
