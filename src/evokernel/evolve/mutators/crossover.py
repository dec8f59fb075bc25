"""Crossover of two parents: the context's parent and a second program drawn from its
inspirations (correct ones of another island preferred, then correct ones) with `ctx.rng`.

  * Offline, knobs (`offline:crossover`): the parent's code with some of its knobs set to the
    second program's values (each shared, differing knob taken with probability 1/2, at least
    one). Used whenever the two programs differ only in knob values.
  * Offline, code (`offline:crossover`, no LLM configured): the parent with some of the second
    program's named module-level statements of the regions (definitions and assignments both
    have under one name and that differ; each taken with probability 1/2, at least one), or,
    for programs with several regions and nothing to match, one whole region of the second.
    Every child is compiled before it is proposed.
  * LLM (`llm:crossover`): a prompt showing both programs; the answer is a new block for the
    parent.

Both record `parent_ids = (parent, second)`.
"""

from __future__ import annotations

from evokernel.evolve.mutators.edits import compiles, named_units, splice
from evokernel.evolve.mutators.llm import LLMMutator
from evokernel.evolve.mutators.offline import describe_knobs
from evokernel.evolve.types import MutationContext, ProgramView, Proposal, is_seen
from evokernel.tasks.blocks import (
    BlockError,
    find_regions,
    knob_value_span,
    parse_knobs,
    replace_region,
    set_knobs,
)


def second_parent(ctx: MutationContext) -> ProgramView | None:
    others = [
        p
        for p in ctx.inspirations
        if p.id != ctx.parent.id and _body(p.code) != _body(ctx.parent.code)
    ]
    pool = (
        [p for p in others if p.correct and p.island != ctx.parent.island]
        or [p for p in others if p.correct]
        or others
    )
    return ctx.rng.choice(pool) if pool else None


def _body(code: str) -> list[str]:
    try:
        lines = [ln for r in find_regions(code) for ln in r.body(code).split("\n")]
    except BlockError:
        lines = code.split("\n")
    return [ln.rstrip() for ln in lines]


def _regions(a: str, b: str) -> list[int]:
    """Indices of the regions that differ, when both programs have the same several."""
    try:
        ra, rb = find_regions(a), find_regions(b)
    except BlockError:
        return []
    if len(ra) < 2 or len(ra) != len(rb):
        return []
    return [i for i in range(len(ra)) if ra[i].body(a) != rb[i].body(b)]


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
        if skeleton(other.code) == skeleton(ctx.parent.code):
            return self._mix(ctx, other)
        if self.llm is not None:
            return self.llm.propose(ctx, other)
        return self._splice(ctx, other)

    def _splice(self, ctx: MutationContext, other: ProgramView) -> Proposal:
        parents = (ctx.parent.id, other.id)
        mine, theirs = named_units(ctx.parent.code), named_units(other.code)
        differ = sorted(n for n in mine if n in theirs and mine[n][1] != theirs[n][1])
        regions = _regions(ctx.parent.code, other.code)
        discarded: dict[str, int] = {}
        for _ in range(self.max_attempts):
            if differ:
                names = [n for n in differ if ctx.rng.random() < 0.5] or [ctx.rng.choice(differ)]
                code = splice(ctx.parent.code, other.code, names)
                what = ", ".join(names)
            elif regions:
                index = ctx.rng.choice(regions)
                body = find_regions(other.code)[index].body(other.code)
                code = replace_region(ctx.parent.code, index, body)
                what = f"EVOLVE-BLOCK {index + 1}"
            else:
                break
            if is_seen(ctx.seen, code) or code == ctx.parent.code:
                discarded["duplicate"] = discarded.get("duplicate", 0) + 1
                continue
            if compiles(code):
                discarded["invalid"] = discarded.get("invalid", 0) + 1
                continue
            description = f"from {other.id} (island {other.island}): {what}"
            return Proposal(code, "offline:crossover", description[:200], parent_ids=parents,
                            discarded=discarded)  # fmt: skip
        why = (
            "no named definition or block differs"
            if not (differ or regions)
            else ("every splice drawn was already tried or did not compile")
        )
        return Proposal(None, "offline:crossover", error=f"{ctx.parent.id} and {other.id}: {why}",
                        parent_ids=parents, discarded=discarded)  # fmt: skip

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
