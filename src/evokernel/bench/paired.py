"""Two systems timed interleaved at one context position: the ratio of their decode steps
with an interval, for differences smaller than the spread between systems measured one after
the other (up to 2% at position 1 for identical code on an H100).

    entry = measure_pair(a, b, prompt, plan, device, rounds=PAIR_ROUNDS)

Both sessions are opened, prefilled and warmed (`plan.warmup` steps each) inside both
systems' contexts; then `rounds` rounds, each timing `block_steps(plan)` steps of one system
and then of the other, from the rewound position (the order alternates, ABBA..., so a drift
over time falls on both). Per round, the median step of each; the entry's `speedup` is the
median over rounds of a's median / b's median (b's speedup over a: above 1, b is faster)
with a bootstrap 95% interval (evaluate.stats.paired_speedup), so "b is never slower" reads
as an interval's lower bound. An exception becomes the entry's `error` (one line).

A control pair, a against a second loaded copy of itself (`control_copy`), measures in the
same run what two copies of identical code differ by (on an H100 up to 0.3%, intervals
excluding 1: the copies' placement in memory, most likely): the floor a pack's speedup must
clear to count.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from evokernel.bench.results import error_line
from evokernel.bench.stepping import CellPlan, free, timed_steps
from evokernel.bench.systems.base import Session, System
from evokernel.evaluate.stats import median, paired_speedup

PAIR_ROUNDS = 8


def block_steps(plan: CellPlan) -> int:
    """Steps per system per round: a quarter of the timed steps, at least 2 (within the cache
    `plan.need` sizes, since it is at most `plan.steps`)."""
    return max(2, plan.steps // 4)


def pair_entry(
    a: str, b: str, plan: CellPlan, rounds: int = PAIR_ROUNDS, error: str | None = None
) -> dict[str, Any]:
    """The result file's `paired` entry before it is measured (or with the reason it was not)."""
    return {
        "a": a,
        "b": b,
        "position": plan.position,
        "rounds": rounds,
        "block_steps": block_steps(plan),
        "speedup": None,
        "ci": None,
        "ms_a": None,
        "ms_b": None,
        "error": error,
        "wall_s": 0.0,
    }


def measure_pair(
    a: System,
    b: System,
    prompt: list[int],
    plan: CellPlan,
    device: str,
    rounds: int = PAIR_ROUNDS,
) -> dict[str, Any]:
    entry = pair_entry(a.name, b.name, plan, rounds)
    start = time.perf_counter()
    sessions: list[Session] = []
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(a.context())
            stack.enter_context(b.context())
            for system in (a, b):
                session = system.open(prompt, plan.need)
                sessions.append(session)
                session.prefill()
                session.rewind()
                for _ in range(plan.warmup):
                    session.step()
            of_a: list[float] = []
            of_b: list[float] = []
            pair = [(a, sessions[0], of_a), (b, sessions[1], of_b)]
            for i in range(rounds):
                for system, session, medians in pair if i % 2 == 0 else pair[::-1]:
                    session.rewind()
                    times = timed_steps(session, entry["block_steps"], device, system.host_timed)
                    medians.append(median(times))
        speedup, (low, high) = paired_speedup(of_a, of_b)
        entry.update(speedup=speedup, ci=[low, high], ms_a=median(of_a), ms_b=median(of_b))
    except Exception as err:  # OOM, a failed load of a graph: the entry says so, the run goes on
        entry["error"] = error_line(err)
    finally:
        for session in sessions:
            with contextlib.suppress(Exception):
                session.close()
        sessions.clear()
        free(device)
    entry["wall_s"] = time.perf_counter() - start
    return entry


CONTROL_SUFFIX = "_control"


def control_copy(system: System) -> System:
    """`system` (freshly loaded, a second instance) renamed as the control of a pair."""
    system.name = system.name + CONTROL_SUFFIX
    return system


def pair_line(entry: dict[str, Any]) -> str:
    head = f"{entry['b']} / {entry['a']} at {entry['position']}"
    if entry["error"] is not None:
        return f"{head}: error: {entry['error']}"
    low, high = entry["ci"]
    return (
        f"{head}: {entry['speedup']:.4f}x [{low:.4f}, {high:.4f}] "
        f"({entry['rounds']} interleaved rounds of {entry['block_steps']} steps; "
        f"{entry['ms_a']:.4f} / {entry['ms_b']:.4f} ms)"
    )
