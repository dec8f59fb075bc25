"""The built-in offline mutator: no endpoint, deterministic given `ctx.rng` and `ctx.seen`.

It works on any Python program: declared knobs when there are any, known transformations of
Triton code, and small source edits anywhere in the evolvable regions (`edits.py`). A child is
the parent with either

  * one or two declared knobs moved (`offline:knob`): to a neighbouring declared value most of
    the time, to any other declared value with probability `jump_prob`; or
  * one known source transformation applied to the EVOLVE-BLOCK body (`offline:transform`,
    see `transforms.py`), when its pattern is present.

  * one source edit (`offline:const`, `offline:operator`, `offline:statement`,
    `offline:control`: a constant perturbed, an operator swapped, a statement deleted,
    duplicated or swapped, a condition or loop rewritten); or
  * the untried knob setting that an additive model of the run's measured fitness ranks first
    (`offline:model`, see `knob_model.py`), with probability `model_prob`.

The first kind tried: a transformation with probability `transform_prob`, an edit with
`edit_prob` (always, after transformations, when the parent declares no movable knob), else
knobs; when it yields nothing new the others follow. Programs `ctx.seen` reports as tried are
skipped: after `max_attempts` random draws it walks the parent's knob neighbours, then the
whole knob space (when it has at most 4096 settings), in an order drawn from `ctx.rng`.

Edits: the family is drawn with weights learned from the run (`family_weights`: for each
family, (children that beat their parent + 1) / (children measured or failed + 2)), then up to
`max_attempts` of its moves in a random order; every child is parsed and compiled, and one that
does not compile or repeats a program already tried is skipped and counted
(`Proposal.discarded`), costing no evaluation.

Only the regions change, and knobs only take declared values, so every child still passes
`check_edit` and `parse_knobs`.
"""

from __future__ import annotations

import random
from typing import Any

from evokernel.evolve.mutators import edits
from evokernel.evolve.mutators.config import OfflineConfig
from evokernel.evolve.mutators.knob_model import rank
from evokernel.evolve.mutators.transforms import TRANSFORMS
from evokernel.evolve.types import MutationContext, ProgramView, Proposal, is_seen
from evokernel.tasks.blocks import (
    BlockError,
    Knob,
    find_regions,
    knob_neighbours,
    knob_setter,
    knob_space,
    knob_space_size,
    knob_values,
    parse_knobs,
    replace_region,
)

MAX_ENUMERATED = 4096


def describe_knobs(knobs: list[Knob], values: dict[str, Any]) -> str:
    """`NAME old -> new` for each knob `values` moves, in declaration order."""
    return ", ".join(
        f"{k.name} {k.value!r} -> {values[k.name]!r}"
        for k in knobs
        if k.name in values and values[k.name] != k.value
    )


class OfflineMutator:
    name = "offline"

    def __init__(self, config: OfflineConfig | None = None) -> None:
        self.config = config or OfflineConfig()

    def propose(self, ctx: MutationContext) -> Proposal:
        parent = ctx.parent.code
        try:
            knobs = parse_knobs(parent)
        except BlockError as err:
            return self._fail(ctx, "offline:knob", f"cannot mutate the parent: {err}")
        tally: dict[str, int] = {}  # children discarded before the proposal, by why
        draw = ctx.rng.random()
        movable = any(len(k.choices) > 1 for k in knobs)
        cfg = self.config
        if draw < cfg.transform_prob:
            first = self._transform
        elif not movable or draw < cfg.transform_prob + cfg.edit_prob:
            first = self._edit
        else:
            first = self._knobs
        order = [first, *(s for s in (self._knobs, self._transform, self._edit) if s != first)]
        if cfg.model_prob > 0 and ctx.rng.random() < cfg.model_prob:
            order.insert(0, self._model)
        reasons = []
        for step in order:
            out = step(ctx, knobs, tally)
            if isinstance(out, Proposal):
                out.discarded = tally
                return out
            reasons.append(out)
        failed = self._fail(ctx, "offline:knob", "; ".join(reasons))
        failed.discarded = tally
        return failed

    def _fail(self, ctx: MutationContext, kind: str, error: str) -> Proposal:
        return Proposal(None, kind, error=error, parent_ids=(ctx.parent.id,))

    def _knobs(
        self, ctx: MutationContext, knobs: list[Knob], tally: dict[str, int]
    ) -> Proposal | str:
        movable = [k for k in knobs if len(k.choices) > 1]
        if not movable:
            return "no declared knob with more than one value"
        cfg, rng, parent = self.config, ctx.rng, ctx.parent.code
        setter = knob_setter(parent)
        checked: set[str] = set()

        def fresh(values: dict[str, Any]) -> str | None:
            full = {**{k.name: k.value for k in knobs}, **values}
            key = repr(sorted(full.items(), key=lambda kv: kv[0]))
            if key in checked or not describe_knobs(knobs, values):
                return None
            checked.add(key)
            code = setter(values)
            return None if is_seen(ctx.seen, code) else code

        for _ in range(cfg.max_attempts):
            n = 2 if len(movable) >= 2 and rng.random() < cfg.two_knobs_prob else 1
            values = {k.name: self._move(k, rng) for k in rng.sample(movable, n)}
            code = fresh(values)
            if code is not None:
                return self._child(ctx, knobs, values, code)
        for values in self._unseen_order(parent, rng):
            code = fresh(values)
            if code is not None:
                return self._child(ctx, knobs, values, code)
        return "every knob setting reachable from the parent was already tried"

    def _model(
        self, ctx: MutationContext, knobs: list[Knob], tally: dict[str, int]
    ) -> Proposal | str:
        parent = ctx.parent.code
        if knob_space_size(parent) > MAX_ENUMERATED:
            return "the knob space is too large to rank"
        samples, tried = [], set()
        for p in ctx.history:
            try:
                values = knob_values(p.code)
            except BlockError:
                continue
            tried.add(tuple(values.get(k.name) for k in knobs))
            if p.fitness is not None:
                samples.append((values, p.fitness))
        if len(samples) < 2:
            return "the knob model needs two measured programs"
        fitness = [f for _, f in samples]
        if max(fitness) - min(fitness) <= 1e-9 * max(fitness):
            # e.g. correctness-only fitness on the CPU: nothing to learn, only to explore
            return "the measured fitness does not vary: nothing for the knob model to rank"
        failures = []
        for p in ctx.failed:
            try:
                values = knob_values(p.code)
            except BlockError:
                continue
            tried.add(tuple(values.get(k.name) for k in knobs))
            failures.append(values)
        space = knob_space(parent)
        ctx.rng.shuffle(space)  # ties go to a seeded order
        untried = [v for v in space if tuple(v[k.name] for k in knobs) not in tried]
        setter = knob_setter(parent)
        for values in rank(knobs, untried, samples, failures):
            moved = describe_knobs(knobs, values)
            code = setter(values)
            if moved and not is_seen(ctx.seen, code):
                return Proposal(
                    code, "offline:model", f"model pick: {moved}", parent_ids=(ctx.parent.id,)
                )
        return "every knob setting was already measured"

    def _child(
        self, ctx: MutationContext, knobs: list[Knob], values: dict[str, Any], code: str
    ) -> Proposal:
        description = describe_knobs(knobs, values)
        return Proposal(code, "offline:knob", description, parent_ids=(ctx.parent.id,))

    def _unseen_order(self, parent: str, rng: random.Random) -> list[dict[str, Any]]:
        near = knob_neighbours(parent)
        rng.shuffle(near)
        if knob_space_size(parent) > MAX_ENUMERATED:
            return near
        space = knob_space(parent)
        rng.shuffle(space)
        return near + space

    def _move(self, knob: Knob, rng: random.Random) -> Any:
        i, n = knob.choices.index(knob.value), len(knob.choices)
        if n > 2 and rng.random() < self.config.jump_prob:
            return knob.choices[rng.choice([j for j in range(n) if j != i])]
        return knob.choices[rng.choice([j for j in (i - 1, i + 1) if 0 <= j < n])]

    def _transform(
        self, ctx: MutationContext, knobs: list[Knob], tally: dict[str, int]
    ) -> Proposal | str:
        parent = ctx.parent.code
        found = []
        for index, region in enumerate(find_regions(parent)):
            body = region.body(parent)
            for name in self.config.transforms:
                new_body = TRANSFORMS[name].apply(body)
                if new_body is not None:
                    found.append((name, index, new_body))
        ctx.rng.shuffle(found)
        for name, index, new_body in found:
            code = replace_region(parent, index, new_body)
            if not is_seen(ctx.seen, code):
                description = f"{name}: {TRANSFORMS[name].summary}"
                return Proposal(code, "offline:transform", description, parent_ids=(ctx.parent.id,))
        if found:
            return "every applicable transformation was already tried"
        return "no known transformation applies to the EVOLVE-BLOCK"

    def _edit(
        self, ctx: MutationContext, knobs: list[Knob], tally: dict[str, int]
    ) -> Proposal | str:
        parent = ctx.parent.code
        moves = edits.find_moves(parent)
        families = [f for f in edits.FAMILIES if moves[f]]
        if not families:
            return "no source edit applies (the regions hold no constant, operator or statement)"
        weights = family_weights(ctx.history, ctx.failed)
        attempts = 0
        while families and attempts < self.config.max_attempts:
            total = sum(weights[f] for f in families)
            x, family = ctx.rng.random() * total, families[-1]
            for f in families:
                x -= weights[f]
                if x < 0:
                    family = f
                    break
            pool = list(moves[family])
            ctx.rng.shuffle(pool)
            for move in pool[: self.config.max_attempts - attempts]:
                attempts += 1
                code, line = edits.apply(parent, move, ctx.rng)
                if code == parent or is_seen(ctx.seen, code):
                    tally["duplicate"] = tally.get("duplicate", 0) + 1
                    continue
                if edits.compiles(code):
                    tally["invalid"] = tally.get("invalid", 0) + 1
                    continue
                return Proposal(code, f"offline:{family}", line, parent_ids=(ctx.parent.id,))
            families.remove(family)
        return f"no new compiling edit in {attempts} tries"


def family_weights(history: list[ProgramView], failed: list[ProgramView]) -> dict[str, float]:
    """Each edit family's weight: (children that beat their parent + 1) / (children measured
    or failed + 2), from the run's own record."""
    fitness = {p.id: p.fitness for p in history}
    tried = dict.fromkeys(edits.FAMILIES, 0)
    better = dict.fromkeys(edits.FAMILIES, 0)
    for p in [*history, *failed]:
        family = p.mutation.removeprefix("offline:")
        if family not in tried:
            continue
        tried[family] += 1
        base = fitness.get(p.parent_ids[0]) if p.parent_ids else None
        if p.fitness is not None and base is not None and p.fitness > base:
            better[family] += 1
    return {f: (better[f] + 1) / (tried[f] + 2) for f in edits.FAMILIES}
