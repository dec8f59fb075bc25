"""The one interface every mutator implements; the controller never knows which one it holds.

A mutator reads a `MutationContext` (the parent, inspirations, the task, the hardware, insights
from earlier attempts, and the run's random generator) and returns a `Proposal`: a whole new
program source, or no source and a one-line reason (a diff that did not apply, an edit outside
the EVOLVE-BLOCK, an endpoint that failed). The controller checks the EVOLVE-BLOCK rule again,
evaluates the source through `evokernel.evaluate`, and stores everything in the database.

Determinism: a mutator draws randomness only from `ctx.rng`, which the controller seeds and
checkpoints. Mutators that call an LLM may block; the controller runs them in worker threads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from evokernel.evaluate.result import EvalResult


@dataclass(frozen=True)
class ProgramView:
    """What a mutator may know about a stored program."""

    id: str
    code: str
    fitness: float | None  # None: incorrect, or not timed
    correct: bool
    island: int
    generation: int
    mutation: str  # kind of the proposal that made it ("seed", "offline:knob", "llm:diff", ...)
    parent_ids: tuple[str, ...] = ()
    result: EvalResult | None = None


@dataclass(frozen=True)
class Usage:
    """Tokens and money of one LLM exchange."""

    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class MutationContext:
    task_name: str
    task_interface: str
    task_description: str
    device: str  # "cuda" | "cpu"
    hardware: dict[str, Any]  # gpu name, measured copy GB/s, roofline notes
    parent: ProgramView
    inspirations: list[ProgramView]  # top and diverse programs; crossover takes a second parent
    insights: list[str]  # what earlier changes did to the measured speedup, newest last
    rng: random.Random
    iteration: int
    last_failure: str = ""  # reason the parent's last child was rejected, for the next prompt


@dataclass
class Proposal:
    code: str | None  # the whole new program; None when the mutator could not produce one
    kind: str  # "offline:knob", "offline:transform", "llm:diff", "llm:rewrite", "crossover", ...
    description: str = ""  # one line: what changed (feeds insights)
    error: str = ""  # one-line reason when code is None
    parent_ids: tuple[str, ...] = ()
    prompt_digest: str = ""  # sha256 of the prompt sent, when an LLM was asked
    response_digest: str = ""
    usage: list[Usage] = field(default_factory=list)


class Mutator(Protocol):
    name: str

    def propose(self, ctx: MutationContext) -> Proposal: ...
