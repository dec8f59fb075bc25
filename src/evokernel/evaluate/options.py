"""What one evaluation may do: limits, repetitions, switches. Validated once, at construction.

Defaults that depend on the device (repetitions, warm-up) are `None` here and resolved by
`resolved(device)`, so one `EvalOptions()` serves both the GPU and the CPU interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from evokernel.errors import ConfigError
from evokernel.evaluate.cascade import Cascade


@dataclass(frozen=True)
class EvalOptions:
    """Options of `evaluate` / `evaluate_many`.

    timeout_s:        wall-clock limit from the candidate's import to its last result (process
                      start-up, before the candidate is imported, has its own limit).
    seed:             seed of inputs, hidden scenarios and schedules; None draws one from
                      os.urandom. The candidate never sees it before its import is done.
    time:             False = correctness only.
    scenarios:        names of public scenarios to use (None = all).
    hidden:           also check the task's hidden scenarios (correctness only).
    input_sets:       input sets per scenario in the timed dtype, cycling distributions.
    reps:             timed rounds per scenario (each round calls the candidate and every
                      baseline once, in random order); None: 50 on CUDA, 2 on the CPU
                      (interpreter timings carry no claim; the rounds exercise the path).
    warmup:           untimed rounds first; None: 5 on CUDA, 0 on the CPU (nothing compiles).
    recheck:          timed candidate outputs per scenario re-checked against the reference.
    static_check:     run the static pre-check (tests turn it off to prove the dynamic checks).
    profile:          on CUDA, a profiler pass per scenario (kernels, streams).
    memory_mb:        host memory (RSS summed over the candidate's processes).
    device_memory_mb: device memory the candidate may allocate beyond its inputs, per call.
    disk_mb:          bytes written under the candidate's private directory.
    startup_timeout_s: limit for the worker's own start-up (an infrastructure fault if hit).
    cascade:          screen first (cascade.py): every correctness check, then only the screen
                      scenarios timed; full timing only when their estimate reaches
                      `promote_above`. None: every public scenario is timed.
    allow_unsandboxed: run candidates even where the OS sandbox (Landlock and seccomp at
                      least, see `isolation_status()`) is unavailable. Off: such a machine
                      refuses to evaluate (an `EvokernelError`), and a worker that came up
                      without it is an infrastructure fault.
    """

    timeout_s: float = 180.0
    seed: int | None = None
    time: bool = True
    scenarios: tuple[str, ...] | None = None
    hidden: bool = True
    input_sets: int = 2
    reps: int | None = None
    warmup: int | None = None
    recheck: int = 6
    static_check: bool = True
    profile: bool = True
    memory_mb: int = 8192
    device_memory_mb: int = 8192
    disk_mb: int = 1024
    startup_timeout_s: float = 240.0
    allow_unsandboxed: bool = False
    cascade: Cascade | None = None

    def __post_init__(self) -> None:
        positive: dict[str, float] = {
            "timeout_s": self.timeout_s,
            "input_sets": self.input_sets,
            "memory_mb": self.memory_mb,
            "device_memory_mb": self.device_memory_mb,
            "disk_mb": self.disk_mb,
            "startup_timeout_s": self.startup_timeout_s,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ConfigError(f"EvalOptions.{name} must be positive, got {value!r}")
        if self.reps is not None and self.reps < 1:
            raise ConfigError(f"EvalOptions.reps must be >= 1, got {self.reps!r}")
        if self.warmup is not None and self.warmup < 0:
            raise ConfigError(f"EvalOptions.warmup must be >= 0, got {self.warmup!r}")
        if self.recheck < 0:
            raise ConfigError(f"EvalOptions.recheck must be >= 0, got {self.recheck!r}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ConfigError(f"EvalOptions.seed must be in [0, 2**63), got {self.seed!r}")
        if self.scenarios is not None:
            object.__setattr__(self, "scenarios", tuple(self.scenarios))

    def resolved(self, device: str) -> EvalOptions:
        """These options with the device-dependent defaults filled in."""
        cuda = device == "cuda"
        return replace(
            self,
            reps=self.reps if self.reps is not None else (50 if cuda else 2),
            warmup=self.warmup if self.warmup is not None else (5 if cuda else 0),
        )
