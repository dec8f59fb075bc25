"""Which untried knob setting looks best, from what the run has measured so far.

An additive model of log-fitness over declared knob values (one effect per knob value, no
interactions), fitted by backfitting with ridge shrinkage towards zero on the programs the run
has evaluated (`MutationContext.history`). Untried settings are ranked by the model's
prediction plus an optimism bonus per knob value that shrinks with the number of programs
that used it (an upper confidence bound), so values nobody tried get a look before the model
trusts its guess.

Why additive: block sizes, warps and split factors mostly act on their own (occupancy,
bytes in flight, parallelism); what interacts is left to the neighbourhood moves. The model
never runs a kernel and never sees the hardware: it only reorders which knob setting is
evaluated next. The offline mutator consults it only once measured fitness varies (on the CPU
interpreter every correct program scores 1.0, and the model would only chase its own optimism).

Failures count: a setting whose program failed (did not compile, timed out, was incorrect) is a
use of each of its values without a measurement. The bonus shrinks with every use, failed or
not, and a value that only ever failed gets no bonus and a penalty of one optimism scale, so
the model stops proposing a value that has only failed (it would otherwise look untried
forever and win every ranking).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from evokernel.tasks.blocks import Knob

RIDGE = 1.0  # pseudo-observations pulling each effect towards 0
SWEEPS = 8  # backfitting passes (converges in a few on these sizes)


def fit_effects(
    knobs: Sequence[Knob], samples: Iterable[tuple[dict[str, Any], float]]
) -> tuple[float, dict[str, dict[Any, float]], dict[str, dict[Any, int]], float]:
    """(mean, effects[knob][value], counts[knob][value], residual std) of log-fitness."""
    data = [(values, math.log(f)) for values, f in samples if f > 0]
    effects = {k.name: dict.fromkeys(k.choices, 0.0) for k in knobs}
    counts = {k.name: dict.fromkeys(k.choices, 0) for k in knobs}
    if not data:
        return 0.0, effects, counts, 1.0
    for values, _ in data:
        for k in knobs:
            if values.get(k.name) in counts[k.name]:
                counts[k.name][values[k.name]] += 1
    mean = sum(y for _, y in data) / len(data)

    def predict(values: dict[str, Any], skip: str = "") -> float:
        return mean + sum(
            effects[k.name].get(values.get(k.name), 0.0) for k in knobs if k.name != skip
        )

    for _ in range(SWEEPS):
        for k in knobs:
            sums = dict.fromkeys(k.choices, 0.0)
            for values, y in data:
                v = values.get(k.name)
                if v in sums:
                    sums[v] += y - predict(values, skip=k.name)
            for v in k.choices:
                effects[k.name][v] = sums[v] / (counts[k.name][v] + RIDGE)
    residuals = [y - predict(values) for values, y in data]
    spread = math.sqrt(sum(r * r for r in residuals) / len(residuals)) if len(data) > 1 else 0.0
    # Optimism scale: the fitness spread seen so far, at least a few percent.
    scale = max(0.05, spread, _std([y for _, y in data]))
    return mean, effects, counts, scale


def rank(
    knobs: Sequence[Knob],
    candidates: Iterable[dict[str, Any]],
    samples: Iterable[tuple[dict[str, Any], float]],
    failures: Iterable[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """`candidates` (knob settings) best first by prediction plus optimism; stable order for
    ties, so the caller's (seeded) candidate order breaks them. `failures`: the knob settings
    of programs that failed."""
    mean, effects, counts, scale = fit_effects(knobs, samples)
    failed = {k.name: dict.fromkeys(k.choices, 0) for k in knobs}
    for values in failures:
        for k in knobs:
            if values.get(k.name) in failed[k.name]:
                failed[k.name][values[k.name]] += 1

    def score(values: dict[str, Any]) -> float:
        s = mean
        for k in knobs:
            v = values[k.name]
            good, bad = counts[k.name][v], failed[k.name][v]
            if bad and not good:
                s -= scale  # only ever failed: no optimism, and below every measured value
            else:
                s += effects[k.name][v] + scale / math.sqrt(1 + good + bad)
        return s

    return sorted(candidates, key=score, reverse=True)


def _std(ys: list[float]) -> float:
    if len(ys) < 2:
        return 0.0
    m = sum(ys) / len(ys)
    return math.sqrt(sum((y - m) ** 2 for y in ys) / (len(ys) - 1))
