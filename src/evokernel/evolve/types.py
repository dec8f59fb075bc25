"""The search's shared vocabulary: every other module of `evokernel.evolve` imports these
downward, and this module imports nothing of the search (and no torch), so the pure parts
(database, islands, summaries, configuration) load without the mutators, the LLM client or the
evaluator.

  code_digest / text_digest   what "the same program" and "the same prompt" mean (sha256)
  ProgramView                 what a mutator may know about a stored program
  Usage                       tokens and money of one LLM exchange
  Proposal                    what a mutator returns: a whole new source, or a one-line error
  MutationContext, Mutator    the one interface every mutator implements
  BudgetExceeded              the run's LLM budget is spent (raised before anything is sent)

The mutator contract: a mutator reads a `MutationContext` (the parent, inspirations, the task,
the hardware, insights from earlier attempts, and the iteration's random generator) and returns
a `Proposal`. `propose` never raises for a bad answer, a dead endpoint or a parent it cannot
mutate: those come back as `Proposal(code=None, error=...)`. The one exception it raises on
purpose is `BudgetExceeded`: nothing was sent, and the controller finishes the evaluations in
flight, checkpoints and stops.

Determinism: a mutator draws randomness only from `ctx.rng`, which the controller derives from
(seed, iteration); it draws all of it before any blocking call. Mutators that call an LLM may
block; the controller runs them in threads, each with its own `ctx.rng`.

Already-tried programs: `ctx.seen` (optional) is either a callable `code -> bool` or a set of
`code_digest(code)` values; mutators that enumerate (the offline knob mutator) skip programs it
reports as tried.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from evokernel.errors import EvokernelError

if TYPE_CHECKING:
    from evokernel.evaluate.result import EvalResult

Seen = Callable[[str], bool] | Collection[str]
"""`code -> already tried?`, or a collection of `code_digest(code)` strings."""


class BudgetExceeded(EvokernelError):
    """The run's token or money budget is spent; raised before a request is sent."""


def code_digest(code: str) -> str:
    """sha256 of a program with line ends, trailing whitespace and trailing blank lines
    normalized, so the database and the mutators agree on what "the same program" is."""
    lines = [ln.rstrip() for ln in code.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def text_digest(text: str) -> str:
    """sha256 of a prompt or response exactly as sent or received."""
    return hashlib.sha256(text.encode()).hexdigest()


def is_seen(seen: Seen | None, code: str) -> bool:
    if seen is None:
        return False
    if callable(seen):
        return bool(seen(code))
    return code_digest(code) in seen


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
    hardware: dict[str, Any]  # "gpu", "copy_gbps", "sm_count", "l2_bytes", "notes" (all optional)
    parent: ProgramView
    inspirations: list[ProgramView]  # top and diverse programs; crossover takes a second parent
    insights: list[str]  # what earlier changes did to the measured speedup, newest last
    rng: random.Random
    iteration: int
    last_failure: str = ""  # reason the parent's last child was rejected, for the next prompt
    seen: Seen | None = None  # programs already tried (see module docstring)
    # Programs the run has measured (distinct code, with a fitness), oldest first: what a
    # mutator may learn from beyond the parent and inspirations (the offline knob model).
    history: list[ProgramView] = field(default_factory=list)
    # Programs whose evaluation failed (distinct code), oldest first: a knob value or an edit
    # family that only ever failed should lose the mutator's favour.
    failed: list[ProgramView] = field(default_factory=list)


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
    prompt: str = ""  # the prompt text (system + user), when an LLM was asked
    response: str = ""  # the raw answer text, when one came back
    # Children the mutator made and threw away before this proposal, by why: "invalid" (did
    # not parse or compile) and "duplicate" (code already tried). They cost no evaluation but
    # are counted in the run's summary.
    discarded: dict[str, int] = field(default_factory=dict)


class Mutator(Protocol):
    name: str

    def propose(self, ctx: MutationContext) -> Proposal: ...
