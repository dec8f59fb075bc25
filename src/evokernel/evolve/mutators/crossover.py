"""Crossover of two parents: the context's parent and a second program drawn from its
inspirations (correct ones preferred) with `ctx.rng`.

  * Offline (`offline:crossover`): the parent's code with some of its knobs set to the second
    program's values (each shared, differing knob taken with probability 1/2, at least one).
    Needs no endpoint; used when no LLM is configured, and always when the two programs differ
    only in knob values (an LLM has nothing to combine there).
  * LLM (`llm:crossover`): a prompt showing both programs; the answer is a new block for the
    parent.

Both record `parent_ids = (parent, second)`.
"""

from __future__ import annotations

from evokernel.evolve.mutators.llm import LLMMutator
from evokernel.evolve.mutators.offline import describe_knobs
from evokernel.evolve.types import MutationContext, ProgramView, Proposal, is_seen
from evokernel.tasks.blocks import (
    BlockError,
    find_block,
    knob_value_span,
    parse_knobs,
    set_knobs,
)


def second_parent(ctx: MutationContext) -> ProgramView | None:
    others = [
        p
        for p in ctx.inspirations
        if p.id != ctx.parent.id and _body(p.code) != _body(ctx.parent.code)
    ]
    pool = [p for p in others if p.correct] or others
    return ctx.rng.choice(pool) if pool else None


def _body(code: str) -> list[str]:
    try:
        lines = find_block(code).body(code).split("\n")
    except BlockError:
        lines = code.split("\n")
    return [ln.rstrip() for ln in lines]


def skeleton(code: str) -> list[str]:
    """The block body with knob values blanked: equal skeletons differ only in knob values."""
    return [_blank_value(ln) for ln in _body(code)]


def _blank_value(line: str) -> str:
    span = knob_value_span(line)
    return line if span is None else f"{line[: span[0]]}_{line[span[1] :]}"


class Crossover:
    name = "crossover"

    def __init__(self, llm: LLMMutator | None = None, max_attempts: int = 16) -> None:
        if llm is not None and llm.mode != "crossover":
            raise ValueError("Crossover needs an LLMMutator in crossover mode")
        self.llm = llm
        self.max_attempts = max_attempts

    def propose(self, ctx: MutationContext) -> Proposal:
        other = second_parent(ctx)
        if other is None:
            return Proposal(
                None,
                "offline:crossover",
                error="crossover needs a second, different program among the inspirations",
                parent_ids=(ctx.parent.id,),
            )
        if self.llm is not None and skeleton(other.code) != skeleton(ctx.parent.code):
            return self.llm.propose(ctx, other)
        return self._mix(ctx, other)

    def _mix(self, ctx: MutationContext, other: ProgramView) -> Proposal:
        parents = (ctx.parent.id, other.id)
        try:
            mine = parse_knobs(ctx.parent.code)
            theirs = {k.name: k.value for k in parse_knobs(other.code)}
        except BlockError as err:
            return Proposal(None, "offline:crossover", error=str(err), parent_ids=parents)
        differ = [
            k
            for k in mine
            if k.name in theirs and theirs[k.name] in k.choices and theirs[k.name] != k.value
        ]
        if not differ:
            return Proposal(
                None,
                "offline:crossover",
                error=f"{ctx.parent.id} and {other.id} share every knob value",
                parent_ids=parents,
            )
        for _ in range(self.max_attempts):
            taken = [k for k in differ if ctx.rng.random() < 0.5] or [ctx.rng.choice(differ)]
            values = {k.name: theirs[k.name] for k in taken}
            code = set_knobs(ctx.parent.code, values)
            if not is_seen(ctx.seen, code):
                description = f"knobs from {other.id}: {describe_knobs(mine, values)}"
                return Proposal(code, "offline:crossover", description, parent_ids=parents)
        return Proposal(
            None,
            "offline:crossover",
            error=f"every knob mix of {ctx.parent.id} and {other.id} drawn was already tried",
            parent_ids=parents,
        )
