"""What the search optimizes: a named kernel task, or a generic OpenEvolve-style program.

The controller sees only the `Problem` protocol: a seed program, how one evaluation of a
program is described (`job`, a self-contained `EvalJob` that a remote worker can run) and run
here (`evaluate`, always in an isolated process, through `evokernel.evaluate`), and how an
`EvalResult` turns into a fitness and per-regime speedups. `KernelProblem` wraps a kernel
task; `GenericProblem` (generic.py, above this module) wraps a user's evaluator.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evokernel.errors import ConfigError
from evokernel.evolve import fitness as fit
from evokernel.evolve.config import SearchConfig
from evokernel.evolve.jobs import EvalJob, run_job
from evokernel.tasks import blocks

if TYPE_CHECKING:
    from evokernel.evaluate.result import EvalResult


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
    screens: bool  # whether evaluations take a cascade threshold (`promote_above`)

    def job(self, code: str, promote_above: float | None = None) -> EvalJob:
        """The evaluation of `code` as a self-contained job (for remote workers)."""
        ...

    def evaluate(
        self, code: str, *, gpu: int = 0, promote_above: float | None = None
    ) -> EvalResult:
        """Evaluate one program here, in an isolated process, on visible GPU `gpu`."""
        ...

    def fitness(self, result: EvalResult) -> float | None: ...

    def regime_speedups(self, result: EvalResult) -> dict[str, float]: ...

    def hardware(self, result: EvalResult | None) -> dict[str, Any]: ...

    def features(self, result: EvalResult) -> dict[str, float]:
        """The evaluator's metrics usable as MAP-Elites features (`metric:<name>`)."""
        ...

    def label_for(self, seed: EvalResult) -> str:
        """The fitness label, once the seed's result says what the fitness is made of."""
        ...

    def spec(self) -> dict[str, Any]:
        """JSON description that `problem_from_spec` turns back into this problem."""
        ...


class KernelProblem:
    """A named kernel task from `evokernel.tasks`, evaluated by `evokernel.evaluate`."""

    def __init__(self, task_name: str, device: str, cfg: SearchConfig, seed_code: str = ""):
        from evokernel.tasks import get_task

        task = get_task(task_name)
        public = task.scenarios(device)
        names = [s.name for s in public]
        for name in cfg.evaluator.screen_scenarios:
            if name not in names:
                raise ConfigError(
                    f"evaluator.screen_scenarios: {task.name} has no public scenario {name!r} "
                    f"on {device} (known: {', '.join(names)})"
                )
        self.task = task
        self.name = task.name
        self.device = device
        self.cfg = cfg
        self.seed_code = seed_code or task.seed_candidate.read_text()
        self.interface = task.interface
        self.description = task.description
        self.scenarios = [(s.name, s.regime) for s in public]
        self.regimes = list(dict.fromkeys(s.regime or "all" for s in public))
        self.timed = device != "cpu"
        self.fitness_kind = "speedup" if self.timed else "correctness"
        self.fitness_label = fit.fitness_label(device)
        # The cascade screens by speed: only where speed is measured.
        self.screens = self.timed and cfg.evaluator.cascade == "auto"

    def job(self, code: str, promote_above: float | None = None) -> EvalJob:
        ev = self.cfg.evaluator
        return EvalJob(
            kind="kernel",
            name=self.name,
            device=self.device,
            code=code,
            timeout_s=ev.timeout_s,
            memory_mb=ev.memory_mb,
            time=self.timed,
            reps=ev.reps or None,
            profile=ev.profile,
            screen_scenarios=tuple(ev.screen_scenarios),
            promote_above=promote_above if self.screens else None,
        )

    def evaluate(
        self, code: str, *, gpu: int = 0, promote_above: float | None = None
    ) -> EvalResult:
        return run_job(self.job(code, promote_above), gpu)

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

    def features(self, result: EvalResult) -> dict[str, float]:
        return {}

    def label_for(self, seed: EvalResult) -> str:
        return self.fitness_label


def read_user_file(label: str, path: Path) -> str:
    """The text of a user file, or a one-line ConfigError saying why it cannot be used."""
    if not path.exists():
        raise ConfigError(f"{label}: no such file: {path}")
    if not path.is_file():
        raise ConfigError(f"{label}: {path} is not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: {path} is not a text file (not UTF-8)") from None
    except OSError as err:
        raise ConfigError(f"{label}: cannot read {path}: {err.strerror or err}") from None
    if "\0" in text:
        raise ConfigError(f"{label}: {path} is not a text file (it holds NUL bytes)")
    return text


def read_program(path: Path, label: str = "--program", single: bool = True) -> str:
    """A program file with well-formed EVOLVE-BLOCK markers (knob declarations included):
    exactly one block for a kernel task (`single`), else any number (none: the whole file)."""
    code = read_user_file(label, path)
    try:
        if single:
            blocks.find_block(code)
        blocks.parse_knobs(code)  # also checks every region
    except blocks.BlockError as err:
        raise ConfigError(f"{label} {path}: {err}") from None
    return code
