"""Test doubles for the search: a problem scored without any process, and a knob mutator.

`FakeProblem` scores a program from its declared knob values with a fixed formula (no timing
noise), so runs are fast and every assertion about fitness, grids and dispatch is exact.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from evokernel.evaluate.result import DeviceInfo, EvalResult, ScenarioResult, TimingStats
from evokernel.evolve import fitness as fit
from evokernel.evolve.llm.accounting import Accounting
from evokernel.evolve.mutators.registry import MutatorSet
from evokernel.evolve.types import MutationContext, Proposal, Usage
from evokernel.reasons import reason
from evokernel.tasks import blocks

SEED = '''"""A toy candidate."""

# EVOLVE-BLOCK-START
A = 1  # tune: 1, 2, 3, 4
B = 1  # tune: 1, 2, 3
C = 0  # tune: 0, 1


def f(x):
    return x * A + B + C
# EVOLVE-BLOCK-END


def entry(x):
    return f(x)
'''

SCENARIOS = [("s_short_1", "short"), ("s_short_2", "short"), ("s_long_1", "long")]


def speedups(code: str) -> dict[str, float]:
    """Per-scenario speedup of a program: short likes A, long likes B; C=1 hurts both."""
    k = blocks.knob_values(code)
    a, b, c = k["A"], k["B"], k["C"]
    short = 0.9 + 0.1 * a - 0.02 * b - 0.1 * c
    long = 0.85 + 0.12 * b - 0.01 * a - 0.1 * c
    return {"s_short_1": short, "s_short_2": short + 0.01, "s_long_1": long}


def _stats(us: float) -> TimingStats:
    return TimingStats(median_us=us, p5_us=us * 0.95, p95_us=us * 1.05, n=20, outliers_dropped=0)


def fake_result(code: str, device: str = "cuda") -> EvalResult:
    if "BROKEN" in code:
        return EvalResult(
            task="toy",
            candidate="sha256:x",
            correct=False,
            reasons=[reason("mismatch", "rel_l2 0.5 > 0.01")],
            stage="correctness",
            device=None,
            timing_label="cuda-events",
        )
    scenarios = []
    if device == "cuda":
        for (name, regime), sp in zip(SCENARIOS, speedups(code).values()):
            scenarios.append(
                ScenarioResult(
                    name=name,
                    regime=regime,
                    params={"n": 1},
                    dtype="bfloat16",
                    candidate=_stats(10.0 / sp),
                    baselines={"torch": _stats(10.0)},
                    baseline="torch",
                    speedup=sp,
                    speedup_ci=(sp * 0.98, sp * 1.02),
                    bytes_moved=1000,
                    achieved_gbps=100.0,
                    roofline_us=1.0,
                    pct_roofline=10.0,
                    host_event_ratio=1.0,
                )
            )
    return EvalResult(
        task="toy",
        candidate="sha256:x",
        correct=True,
        reasons=[],
        stage="done",
        device=DeviceInfo(kind=device, name="fake", torch="0", triton="0"),
        timing_label="cuda-events" if device == "cuda" else "cpu-interpreter",
        scenarios=scenarios,
    )


class FakeProblem:
    def __init__(
        self,
        device: str = "cuda",
        delay_s: float = 0.0,
        seed_code: str = SEED,
        screens: bool = False,
    ):
        self.name = "toy"
        self.device = device
        self.seed_code = seed_code
        self.interface = "def entry(x)"
        self.description = "toy problem"
        self.regimes = ["short", "long"]
        self.scenarios = list(SCENARIOS)
        self.timed = device == "cuda"
        self.fitness_kind = "speedup" if self.timed else "correctness"
        self.fitness_label = fit.fitness_label(device)
        self.delay_s = delay_s
        self.screens = screens
        self.evaluated: list[str] = []
        self.calls: list[dict[str, Any]] = []  # code, gpu, promote_above, thread of each call
        self._lock = threading.Lock()

    def job(self, code: str, promote_above: float | None = None) -> Any:
        raise NotImplementedError("a fake problem evaluates in this process only")

    def evaluate(
        self, code: str, *, gpu: int = 0, promote_above: float | None = None
    ) -> EvalResult:
        with self._lock:
            self.evaluated.append(code)
            call = {"code": code, "gpu": gpu, "promote_above": promote_above}
            self.calls.append({**call, "thread": threading.current_thread().name})
        if self.delay_s:
            time.sleep(self.delay_s)
        result = fake_result(code, self.device)
        if promote_above is not None and result.correct:
            estimate = fit.geomean(s.speedup_ci[1] for s in result.scenarios if s.speedup_ci)
            if estimate < promote_above:  # what the evaluator's cascade does
                result.stage = "screened"
                result.scenarios = result.scenarios[:1]
                result.artifacts["cascade"] = f"estimate {estimate:.3f} < {promote_above:.3f}"
        return result

    def fitness(self, result: EvalResult) -> float | None:
        return fit.kernel_fitness(result, self.device)

    def features(self, result: EvalResult) -> dict[str, float]:
        return {}

    def label_for(self, seed: EvalResult) -> str:
        return self.fitness_label

    def regime_speedups(self, result: EvalResult) -> dict[str, float]:
        return fit.regime_speedups(result) if self.timed else {}

    def hardware(self, result: EvalResult | None) -> dict[str, Any]:
        return {"device": self.device}

    def spec(self) -> dict[str, Any]:
        return {"kind": "fake"}


def mset(mutator: Any = None) -> MutatorSet:
    """A mutator set holding only `mutator` (default: a KnobMutator)."""
    return MutatorSet({"offline": mutator or KnobMutator()}, {"offline": 1.0}, None, Accounting())


class KnobMutator:
    """Moves one random knob to a random declared value (may repeat earlier programs)."""

    name = "test"

    def __init__(self, tokens: int = 0, broken_every: int = 0):
        self.tokens = tokens
        self.broken_every = broken_every
        self.contexts: list[MutationContext] = []

    def propose(self, ctx: MutationContext) -> Proposal:
        self.contexts.append(ctx)
        knobs = blocks.parse_knobs(ctx.parent.code)
        knob = ctx.rng.choice(knobs)
        value = ctx.rng.choice(knob.choices)
        code = blocks.set_knobs(ctx.parent.code, {knob.name: value})
        if self.broken_every and ctx.iteration % self.broken_every == self.broken_every - 1:
            code = code.replace("return x * A", "return x * A  # BROKEN")
        usage = [Usage("fake-model", self.tokens, self.tokens, 0.001)] if self.tokens else []
        return Proposal(
            code=code,
            kind="test:knob",
            description=f"{knob.name} {knob.value} -> {value}",
            usage=usage,
        )
