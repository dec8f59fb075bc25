"""What became of one program, as the tree marks it.

One outcome per database row, from its status, its reasons and its parent's fitness:

    seed        the starting program (when correct)
    improved    correct, with a fitness above its first parent's (faster, for kernel tasks)
    correct     correct, not above its parent (or either fitness unknown)
    incorrect   evaluated and wrong (mismatch, wrong shape, tampering, ...)
    crashed     the candidate's process died or raised (crashed, exception, load, cuda-error,
                memory-budget, no-result)
    timeout     killed at its wall-clock limit
    static      rejected by the evaluator's static check before anything ran
    not-run     not evaluated through no fault of its own (infrastructure, batch budget)
    rejected    the proposal produced no program, or broke the EVOLVE-BLOCK rule
    duplicate   code its island already held (reuses that evaluation)
    migrant     a copy of another island's elite

A failed row with several reasons takes the first category in the order static, timeout,
crashed, not-run, incorrect.
"""

from __future__ import annotations

import math

from evokernel.reasons import reason_code

OUTCOMES: dict[str, str] = {
    "seed": "seed (the starting program)",
    "improved": "improved on its parent (faster)",
    "correct": "correct, not better than its parent",
    "incorrect": "incorrect (wrong or tampered output)",
    "crashed": "crashed or raised",
    "timeout": "timed out",
    "static": "rejected by the static check",
    "not-run": "not evaluated (evaluator or budget)",
    "rejected": "no program (proposal rejected)",
    "duplicate": "duplicate of code its island held",
    "migrant": "migrant (copy of an elite)",
    "unknown": "unknown status",
}

CRASH_CODES = frozenset(
    {"crashed", "exception", "load", "cuda-error", "memory-budget", "no-result"}
)
NOT_RUN_CODES = frozenset({"infrastructure", "budget"})


def finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number(value: object) -> float | None:
    """`value` as a float when it is a finite number, else None."""
    return float(value) if finite(value) else None  # type: ignore[arg-type]


def failure_category(reasons: tuple[str, ...] | list[str]) -> str:
    codes = {reason_code(r) for r in reasons}
    if "static" in codes:
        return "static"
    if "timeout" in codes:
        return "timeout"
    if codes & CRASH_CODES:
        return "crashed"
    if codes & NOT_RUN_CODES:
        return "not-run"
    return "incorrect"


def classify(
    status: str,
    reasons: tuple[str, ...] | list[str],
    fitness: float | None,
    parent_fitness: float | None,
    *,
    seed: bool = False,
    migrant: bool = False,
) -> str:
    if status == "rejected":
        return "rejected"
    if migrant:
        return "migrant"
    if status == "duplicate":
        return "duplicate"
    if status == "failed":
        return failure_category(reasons)
    if status != "ok":
        return "unknown"
    if seed:
        return "seed"
    mine, theirs = number(fitness), number(parent_fitness)
    if mine is not None and theirs is not None and mine > theirs:
        return "improved"
    return "correct"
