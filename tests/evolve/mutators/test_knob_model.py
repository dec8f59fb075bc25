"""The additive knob model and the offline mutator's `offline:model` children: the model finds
the best setting of a separable landscape from one-knob variations, prefers values nobody
tried when the data say nothing, and the mutator never proposes a measured setting."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from evokernel.evolve.mutators.config import OfflineConfig
from evokernel.evolve.mutators.knob_model import fit_effects, rank
from evokernel.evolve.mutators.offline import OfflineMutator
from evokernel.evolve.types import MutationContext, ProgramView
from evokernel.tasks.blocks import knob_space, knob_values, parse_knobs, set_knobs

# Separable: each knob has one best value; log-fitness adds the knobs' terms.
BEST = {"BLOCK_N": 32, "NUM_WARPS": 2, "BLOCK": 128, "NUM_STAGES": 3}


def landscape(values: dict) -> float:
    return math.exp(-sum(0.2 * (values[k] != v) for k, v in BEST.items()))


def one_knob_variations(source: str) -> list[dict]:
    """The seed's setting and every setting that moves exactly one of its knobs."""
    start = knob_values(source)
    out = [start]
    for k in parse_knobs(source):
        for v in k.choices:
            if v != start[k.name]:
                out.append({**start, k.name: v})
    return out


def test_model_ranks_the_separable_optimum_first(toy_source):
    knobs = parse_knobs(toy_source)
    seen = one_knob_variations(toy_source)
    samples = [(v, landscape(v)) for v in seen]
    untried = [v for v in knob_space(toy_source) if v not in seen]
    assert BEST in untried  # the optimum moves every knob: only the model can combine them
    assert rank(knobs, untried, samples)[0] == BEST


def test_effects_follow_the_data_and_untried_values_count_zero(toy_source):
    knobs = parse_knobs(toy_source)
    samples = [({**knob_values(toy_source), "NUM_WARPS": w}, f) for w, f in ((1, 1.0), (2, 2.0))]
    _, effects, counts, _ = fit_effects(knobs, samples)
    assert effects["NUM_WARPS"][2] > effects["NUM_WARPS"][1]
    assert counts["NUM_WARPS"] == {1: 1, 2: 1, 4: 0, 8: 0}
    assert effects["NUM_WARPS"][8] == 0.0


def test_optimism_prefers_untried_values_when_the_data_are_flat(toy_source):
    knobs = parse_knobs(toy_source)
    start = knob_values(toy_source)
    samples = [(start, 1.0), ({**start, "BLOCK": 32}, 1.0)]
    candidates = [{**start, "BLOCK": 32}, {**start, "BLOCK": 128}]
    assert rank(knobs, candidates, samples)[0]["BLOCK"] == 128  # never tried: a bonus


def ctx_with_history(source: str, history: list[dict], seed: int) -> MutationContext:
    views = [
        ProgramView(f"p{i}", set_knobs(source, v), landscape(v), True, 0, 0, "offline:knob")
        for i, v in enumerate(history)
    ]
    return MutationContext(
        task_name="toy",
        task_interface="",
        task_description="",
        device="cuda",
        hardware={},
        parent=views[0],
        inspirations=[],
        insights=[],
        rng=random.Random(seed),
        iteration=len(history),
        history=views,
    )


def test_model_children_are_new_declared_settings_and_deterministic(toy_source):
    history = one_knob_variations(toy_source)
    mutator = OfflineMutator(OfflineConfig(model_prob=1.0, transform_prob=0.0, edit_prob=0.0))
    first = mutator.propose(ctx_with_history(toy_source, history, seed=3))
    again = mutator.propose(ctx_with_history(toy_source, history, seed=3))
    assert first.kind == "offline:model" and first.code == again.code
    assert first.code is not None and knob_values(first.code) == BEST
    assert first.description.startswith("model pick: ")


def test_model_needs_measurements_and_falls_back_to_knob_moves(toy_source):
    mutator = OfflineMutator(OfflineConfig(model_prob=1.0, transform_prob=0.0, edit_prob=0.0))
    child = mutator.propose(ctx_with_history(toy_source, [knob_values(toy_source)], seed=1))
    assert child.kind == "offline:knob" and child.code is not None


def test_model_never_proposes_a_measured_setting(toy_source):
    space = knob_space(toy_source)
    mutator = OfflineMutator(OfflineConfig(model_prob=1.0, transform_prob=0.0, edit_prob=0.0))
    for seed in range(12):
        history = random.Random(seed).sample(space, 20)
        child = mutator.propose(ctx_with_history(toy_source, history, seed))
        assert child.kind == "offline:model" and child.code is not None
        assert knob_values(child.code) not in history


def test_model_abstains_when_fitness_does_not_vary(toy_source):
    """Correctness-only fitness (the CPU interpreter): every program scores 1.0."""
    history = one_knob_variations(toy_source)
    context = ctx_with_history(toy_source, history, seed=2)
    context.history = [replace(p, fitness=1.0) for p in context.history]
    mutator = OfflineMutator(OfflineConfig(model_prob=1.0, transform_prob=0.0, edit_prob=0.0))
    assert mutator.propose(context).kind == "offline:knob"
