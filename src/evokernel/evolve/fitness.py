"""Fitness and per-regime speedups of one evaluated kernel program.

The fitness is a plain, conservative speedup over the task's stock baseline:

    fitness = geometric mean over the public scenarios of the lower bound of the speedup's
              bootstrap 95% interval (`ScenarioResult.speedup_ci[0]`)

A scenario flagged by the evaluator (e.g. "beyond-roofline") or without an interval counts 0,
so the whole fitness is 0 until a person looks. An incorrect program has no fitness (None).
A fitness above 1 means: faster than the baseline on the (geometric) average, with 95%
confidence per scenario.

On `--device cpu` kernels run under the Triton interpreter, whose timings mean nothing; the
fitness there is correctness only (1.0 for a correct program) and every display says so
(`fitness_label`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from evokernel.evaluate.result import EvalResult, ScenarioResult

SPEEDUP_LABEL = "speedup lower bound (95%), geomean over public scenarios"
CPU_LABEL = "correctness only (CPU interpreter, no speed claim)"
GENERIC_LABEL = "combined_score from the user's evaluator"


def fitness_label(device: str) -> str:
    return CPU_LABEL if device == "cpu" else SPEEDUP_LABEL


def scenario_score(s: ScenarioResult) -> float:
    """The lower bound of the speedup interval; 0 when flagged or unmeasured."""
    if s.flags or s.speedup_ci is None:
        return 0.0
    return max(0.0, float(s.speedup_ci[0]))


def geomean(values: Iterable[float]) -> float:
    vals = list(values)
    if not vals:
        return 0.0
    if any(v <= 0 for v in vals):
        return 0.0
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def kernel_fitness(result: EvalResult, device: str) -> float | None:
    if not result.correct:
        return None
    if device == "cpu":
        return 1.0
    return geomean(scenario_score(s) for s in result.scenarios)


def regime_speedups(result: EvalResult, stat: str = "geomean") -> dict[str, float]:
    """Per regime ("short", "long", ...): the scenarios' interval lower bounds combined by
    `stat` (geomean or max). Empty for incorrect or untimed results."""
    if not result.correct:
        return {}
    by_regime: dict[str, list[float]] = {}
    for s in result.scenarios:
        if s.speedup_ci is None and not s.flags:
            continue
        by_regime.setdefault(s.regime or "all", []).append(scenario_score(s))
    combine = max if stat == "max" else geomean
    return {r: combine(v) for r, v in by_regime.items()}


def format_regimes(regimes: dict[str, float]) -> str:
    return ", ".join(f"{r} {v:.3f}x" for r, v in regimes.items()) or "-"
