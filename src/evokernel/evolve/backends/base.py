"""The evaluation backend interface: where the search's evaluations run.

    backend = open_backend(cfg, device)                      # backends/__init__.py
    future = backend.submit(problem, code, promote_above)    # never blocks
    evaluation = future.result()                             # an Evaluation
    backend.close()

Two implementations: `local` (threads of this process, each driving one isolated evaluation
at a time on its own GPU, or CPU slot) and `ray` (each evaluation a Ray task pinned to one GPU
of a cluster). The controller never knows which one it holds, and the run's database stays
with the controller: a run resumes the same way whatever the backend.

Faults (the contract both implementations keep):

  * What the candidate does is the candidate's: its failures, crashes and timeouts come back as
    an `EvalResult` with reasons, from `evokernel.evaluate`, as on one host.
  * A worker or node that dies under an evaluation, or an evaluator that raises, is an
    infrastructure fault: the evaluation is re-queued, at most `max_retries` times. After that
    the `Evaluation` holds an `infrastructure` result naming every fault (no fitness; the
    program is stored as failed), so one bad node cannot stall a run forever.
  * A fault that re-queuing cannot cure (the cluster is gone, a worker cannot import evokernel
    or runs another version of it, a generic evaluator missing on a node) fails the future
    with `BackendError`: the run stops with that line, and `--resume` redoes what was in
    flight.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from evokernel.errors import EvokernelError

if TYPE_CHECKING:
    from evokernel.evaluate.result import EvalResult
    from evokernel.evolve.problem import Problem


class BackendError(EvokernelError):
    """The backend cannot evaluate at all (not one evaluation's fault)."""


@dataclass
class Evaluation:
    """One finished evaluation, as the backend hands it to the controller."""

    result: EvalResult
    wall_s: float  # seconds of the successful attempt, on the worker
    where: dict[str, Any]  # e.g. {"backend": "local", "worker": 1, "gpu": 1}
    attempts: int = 1  # 1 + re-queues after infrastructure faults
    faults: list[str] = field(default_factory=list)  # one line per fault, oldest first

    def record(self) -> dict[str, Any]:
        """What the database keeps (column `evaluated_on`)."""
        return {**self.where, "attempts": self.attempts, "faults": list(self.faults)}


class Backend(Protocol):
    name: str  # "local" | "ray"
    workers: int  # evaluations that run at once

    def submit(
        self, problem: Problem, code: str, promote_above: float | None = None
    ) -> Future[Evaluation]: ...

    def describe(self) -> str:
        """One line for the run's start: where evaluations go."""
        ...

    def close(self) -> None: ...


def lost_result(name: str, faults: list[str]) -> EvalResult:
    """The result of an evaluation given up after `faults` (infrastructure, no fitness)."""
    from evokernel.evaluate.result import EvalResult
    from evokernel.reasons import reason

    detail = f"evaluation lost {len(faults)} times, given up: " + " | ".join(faults[-3:])
    return EvalResult(
        task=name,
        candidate="program",
        correct=False,
        reasons=[reason("infrastructure", detail[:2000])],
        stage="load",
        device=None,
        timing_label="",
    )


def fault_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}" if text else type(err).__name__
