"""What the search optimizes: a named kernel task, or a generic OpenEvolve-style program.

The controller sees only the `Problem` protocol: a seed program, how to evaluate a program
(always in an isolated process, through `evokernel.evaluate`), and how an `EvalResult` turns
into a fitness and per-regime speedups. `KernelProblem` wraps a kernel task; `GenericProblem`
(generic.py) wraps a user's `evaluate(path) -> dict`.
"""

from __future__ import annotations

from typing import Any, Protocol

from evokernel.evaluate.result import EvalResult
from evokernel.evolve import fitness as fit
from evokernel.evolve.config import SearchConfig


class Problem(Protocol):
    name: str  # task name, or "generic:<program file stem>"
    device: str  # "cuda" | "cpu"
    seed_code: str
    interface: str
    description: str
    regimes: list[str]  # public scenario regimes, in order (empty for generic problems)
    scenarios: list[tuple[str, str]]  # public (name, regime) in order: the dispatch table's rows
    timed: bool  # whether speedups are measured (regime features, insights)
    fitness_kind: str  # "speedup" | "correctness" (CPU interpreter) | "score" (generic)
    fitness_label: str

    def evaluate(self, code: str, *, slot: int = 0) -> EvalResult:
        """Evaluate one program in an isolated process. `slot`: the evaluation worker's index
        (worker i uses GPU i when several are visible)."""
        ...

    def fitness(self, result: EvalResult) -> float | None: ...

    def regime_speedups(self, result: EvalResult) -> dict[str, float]: ...

    def hardware(self, result: EvalResult | None) -> dict[str, Any]: ...

    def spec(self) -> dict[str, Any]:
        """JSON description that `problem_from_spec` turns back into this problem."""
        ...


class KernelProblem:
    """A named kernel task from `evokernel.tasks`, evaluated by `evokernel.evaluate`."""

    def __init__(self, task_name: str, device: str, cfg: SearchConfig, seed_code: str = ""):
        from evokernel.tasks import get_task

        task = get_task(task_name)
        self.task = task
        self.name = task.name
        self.device = device
        self.cfg = cfg
        self.seed_code = seed_code or task.seed_candidate.read_text()
        self.interface = task.interface
        self.description = task.description
        public = task.scenarios(device)
        self.scenarios = [(s.name, s.regime) for s in public]
        self.regimes = list(dict.fromkeys(s.regime or "all" for s in public))
        self.timed = device != "cpu"
        self.fitness_kind = "speedup" if self.timed else "correctness"
        self.fitness_label = fit.fitness_label(device)

    def evaluate(self, code: str, *, slot: int = 0) -> EvalResult:
        from evokernel.evaluate import EvalOptions, evaluate

        ev = self.cfg.evaluator
        options = EvalOptions(
            timeout_s=ev.timeout_s,
            time=self.timed,
            reps=ev.reps or None,
            profile=ev.profile,
            memory_mb=ev.memory_mb,
        )
        return evaluate(self.name, code, device=self.device, options=options)

    def fitness(self, result: EvalResult) -> float | None:
        return fit.kernel_fitness(result, self.device)

    def regime_speedups(self, result: EvalResult) -> dict[str, float]:
        if not self.timed:
            return {}
        return fit.regime_speedups(result, self.cfg.grid.regime_stat)

    def hardware(self, result: EvalResult | None) -> dict[str, Any]:
        dev = result.device if result is not None else None
        if dev is None:
            return {"device": self.device}
        return {
            "device": self.device,
            "gpu": dev.name,
            "copy_gbps": dev.copy_gbps,
            "sm_count": dev.sm_count,
            "l2_bytes": dev.l2_bytes,
        }

    def spec(self) -> dict[str, Any]:
        return {"kind": "kernel", "task": self.name}


def problem_from_spec(
    spec: dict[str, Any], device: str, cfg: SearchConfig, seed_code: str
) -> Problem:
    """Rebuild the problem a run was started with (for --resume), with its original seed."""
    if spec["kind"] == "kernel":
        return KernelProblem(spec["task"], device, cfg, seed_code)
    from evokernel.evolve.generic import GenericProblem

    return GenericProblem.from_spec(spec, device, cfg, seed_code)
