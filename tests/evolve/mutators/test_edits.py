"""Source edits without annotations: found by the parser inside the regions only, every child
compiled, powers of two kept, indices and knobs untouched; code crossover between islands; and
the knob model and the edit families learning from failures."""

from __future__ import annotations

import ast
import random
from collections import Counter
from pathlib import Path

import pytest

from evokernel.evolve.mutators import edits
from evokernel.evolve.mutators.config import OfflineConfig
from evokernel.evolve.mutators.crossover import Crossover
from evokernel.evolve.mutators.knob_model import rank
from evokernel.evolve.mutators.offline import OfflineMutator, family_weights
from evokernel.evolve.types import MutationContext, ProgramView
from evokernel.tasks.blocks import check_edit, parse_knobs

FM = Path(__file__).parents[1] / "openevolve" / "function_minimization" / "initial_program.py"

TWO_BLOCKS = """import math

# EVOLVE-BLOCK-START
STEP = 0.25
BLOCK = 64
def grow(x, items):
    if x < 10 and items[0] > 1:
        x = x * 2 + 1
    for i in range(1, 8):
        x += i
    return max(x, 3)
# EVOLVE-BLOCK-END

FIXED = 7  # never edited

# EVOLVE-BLOCK-START
def shrink(x):
    y = x / 3.0
    z = y - 1
    return z
# EVOLVE-BLOCK-END
"""


def _ctx(code: str, seed: int = 0, **kw) -> MutationContext:
    parent = kw.pop("parent", ProgramView("p0", code, 1.0, True, 0, 1, "seed"))
    return MutationContext(
        task_name="t", task_interface="", task_description="", device="cpu", hardware={},
        parent=parent, inspirations=kw.pop("inspirations", []), insights=[],
        rng=random.Random(seed), iteration=0, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("source", [TWO_BLOCKS, FM.read_text()], ids=["two-blocks", "fm"])
def test_every_move_compiles_and_stays_inside_the_regions(source):
    moves = edits.find_moves(source)
    assert all(moves[f] for f in edits.FAMILIES), {f: len(m) for f, m in moves.items()}
    rng = random.Random(0)
    for family in edits.FAMILIES:
        for move in moves[family]:
            child, line = edits.apply(source, move, rng)
            assert child != source and line.startswith("line ")
            assert check_edit(source, child) is None, line
            if family != "statement":  # a swapped or deleted statement may break a name
                assert edits.compiles(child) == "", line
    assert "FIXED = 7  # never edited" in TWO_BLOCKS


def test_constants_keep_their_kind_and_indices_and_knobs_are_left_alone():
    rng = random.Random(1)
    powers = Counter(edits.new_number(64, random.Random(i)) for i in range(400))
    assert set(powers) <= {32, 128, -64}
    assert {edits.new_number(True, rng) for _ in range(5)} == {False}
    big = {edits.new_number(1000, random.Random(i)) for i in range(400)}
    assert big <= {2000, 500, 1250, 800, 10000, 100, -1000}
    src = "# EVOLVE-BLOCK-START\nN = 4  # tune: 2, 4, 8\nx = [1, 2][0] + 5\n# EVOLVE-BLOCK-END\n"
    texts = {m.text for m in edits.find_moves(src)["const"]}
    assert texts == {"1", "2", "5"}  # not the knob's 4, not the index 0


def test_a_source_that_does_not_parse_has_no_moves():
    assert all(not m for m in edits.find_moves("def f(:\n").values())


def test_the_offline_mutator_edits_an_unannotated_program_deterministically():
    mut = OfflineMutator(OfflineConfig())
    a = [mut.propose(_ctx(TWO_BLOCKS, i)) for i in range(30)]
    b = [mut.propose(_ctx(TWO_BLOCKS, i)) for i in range(30)]
    assert [(p.code, p.description) for p in a] == [(p.code, p.description) for p in b]
    kinds = Counter(p.kind for p in a)
    assert set(kinds) <= {f"offline:{f}" for f in edits.FAMILIES} and len(kinds) >= 3
    for p in a:
        assert p.code is not None and check_edit(TWO_BLOCKS, p.code) is None
        ast.parse(p.code)


def test_a_kernel_seed_without_annotations_gets_its_constants_moved():
    seed = (Path(__file__).parents[3] / "src/evokernel/tasks/decode_linear/seed.py").read_text()
    stripped = "\n".join(ln.split("  # tune:")[0] for ln in seed.splitlines()) + "\n"
    assert parse_knobs(stripped) == []
    consts = {m.text for m in edits.find_moves(stripped)["const"]}
    assert {"64", "128", "4", "1", "16", "3"} <= consts
    mut = OfflineMutator(OfflineConfig())
    kinds = Counter(mut.propose(_ctx(stripped, i)).kind for i in range(40))
    assert kinds["offline:const"] > 0


def test_code_crossover_takes_named_definitions_from_another_island():
    a = "# EVOLVE-BLOCK-START\nK = 1\ndef f(x):\n    return x + K\n# EVOLVE-BLOCK-END\n"
    b = "# EVOLVE-BLOCK-START\nK = 5\ndef f(x):\n    return x * K\n# EVOLVE-BLOCK-END\n"
    same_island = ProgramView("q0", b.replace("K = 5", "K = 6"), 0.5, True, 0, 1, "x")
    other_island = ProgramView("q1", b, 0.9, True, 2, 1, "x")
    ctx = _ctx(a, 3, inspirations=[same_island, other_island])
    prop = Crossover().propose(ctx)
    assert prop.kind == "offline:crossover" and prop.parent_ids == ("p0", "q1")
    assert prop.code is not None and prop.code != a and check_edit(a, prop.code) is None
    assert "island 2" in prop.description


def test_a_knob_value_that_only_failed_loses_its_bonus():
    from evokernel.tasks.blocks import Knob

    knobs = [Knob("A", 1, (1, 2, 3), 0)]
    measured = [({"A": 1}, 1.0), ({"A": 2}, 1.0)]
    assert rank(knobs, [{"A": 3}, {"A": 2}], measured)[0] == {"A": 3}  # untried: optimism
    failed = [{"A": 3}] * 3
    assert rank(knobs, [{"A": 3}, {"A": 2}], measured, failed)[0] == {"A": 2}


def test_edit_families_that_only_fail_lose_weight():
    view = lambda i, kind, fit, parent: ProgramView(
        f"c{i}", "", fit, fit is not None, 0, 1, kind, (parent,)
    )
    history = [view(0, "seed", 1.0, "")] + [view(i, "offline:const", 2.0, "c0") for i in (1, 2)]
    failed = [view(i, "offline:statement", None, "c0") for i in range(3, 9)]
    w = family_weights(history, failed)
    assert w["const"] > w["operator"] > w["statement"]
