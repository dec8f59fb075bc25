"""The built-in offline mutator: no endpoint, deterministic given `ctx.rng` and `ctx.seen`.

A child is the parent with either

  * one or two declared knobs moved (`offline:knob`): to a neighbouring declared value most of
    the time, to any other declared value with probability `jump_prob`; or
  * one known source transformation applied to the EVOLVE-BLOCK body (`offline:transform`,
    see `transforms.py`), when its pattern is present.

  * the untried knob setting that an additive model of the run's measured fitness ranks first
    (`offline:model`, see `knob_model.py`), with probability `model_prob`.

With probability `transform_prob` it tries a transformation first, else knobs first; when the
first kind yields nothing new it falls back to the other. Programs `ctx.seen` reports as tried
are skipped: after `max_attempts` random draws it walks the parent's knob neighbours, then the
whole knob space (when it has at most 4096 settings), in an order drawn from `ctx.rng`.

Only the region changes, and knobs only take declared values, so every child still passes
`check_edit` and `parse_knobs`.
"""

from __future__ import annotations

import random
from typing import Any

from evokernel.evolve.mutators.config import OfflineConfig
from evokernel.evolve.mutators.knob_model import rank
from evokernel.evolve.mutators.transforms import TRANSFORMS
from evokernel.evolve.types import MutationContext, Proposal, is_seen
from evokernel.tasks.blocks import (
    BlockError,
    Knob,
    find_block,
    knob_neighbours,
    knob_setter,
    knob_space,
    knob_space_size,
    knob_values,
    parse_knobs,
    replace_block,
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
        transform_first = ctx.rng.random() < self.config.transform_prob
        order = [self._knobs, self._transform]
        if transform_first:
            order.reverse()
        if self.config.model_prob > 0 and ctx.rng.random() < self.config.model_prob:
            order.insert(0, self._model)
        reasons = []
        for step in order:
            out = step(ctx, knobs)
            if isinstance(out, Proposal):
                return out
            reasons.append(out)
        return self._fail(ctx, "offline:knob", "; ".join(reasons))

    def _fail(self, ctx: MutationContext, kind: str, error: str) -> Proposal:
        return Proposal(None, kind, error=error, parent_ids=(ctx.parent.id,))

    def _knobs(self, ctx: MutationContext, knobs: list[Knob]) -> Proposal | str:
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

    def _model(self, ctx: MutationContext, knobs: list[Knob]) -> Proposal | str:
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
        space = knob_space(parent)
        ctx.rng.shuffle(space)  # ties go to a seeded order
        untried = [v for v in space if tuple(v[k.name] for k in knobs) not in tried]
        setter = knob_setter(parent)
        for values in rank(knobs, untried, samples):
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

    def _transform(self, ctx: MutationContext, knobs: list[Knob]) -> Proposal | str:
        parent = ctx.parent.code
        body = find_block(parent).body(parent)
        found = []
        for name in self.config.transforms:
            new_body = TRANSFORMS[name].apply(body)
            if new_body is not None:
                found.append((name, new_body))
        ctx.rng.shuffle(found)
        for name, new_body in found:
            code = replace_block(parent, new_body)
            if not is_seen(ctx.seen, code):
                description = f"{name}: {TRANSFORMS[name].summary}"
                return Proposal(code, "offline:transform", description, parent_ids=(ctx.parent.id,))
        if found:
            return "every applicable transformation was already tried"
        return "no known transformation applies to the EVOLVE-BLOCK"
