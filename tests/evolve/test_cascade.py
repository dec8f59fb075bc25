"""The controller's side of the evaluator's cascade: each evaluation carries the fitness its
program must beat to enter the top of its island; a screened program is stored (evaluated,
correct, counted) but never becomes a parent, an elite or a dispatch-table entry."""

from __future__ import annotations

import io

from evolve_fakes import FakeProblem, mset

from evokernel.evaluate import Cascade, EvalOptions
from evokernel.evolve.cascade import promote_threshold, with_cascade
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.islands import Population
from evokernel.evolve.problem import KernelProblem
from evokernel.evolve.session import create_session
from evokernel.evolve.status import read_status
from evokernel.evolve.types import code_digest

ELITE_POOL = 2


def _search(tmp_path, iterations=30):
    cfg = config_from_dict(
        {
            "islands": {"count": 2, "migration_interval": 3, "migration_count": 1},
            "selection": {"elite_pool": ELITE_POOL},
            "budget": {"iterations": iterations},
            "checkpoint": {"write_sources": False},
        }
    )
    problem = FakeProblem(screens=True)
    session = create_session(tmp_path / "run", problem, cfg)
    try:
        out = session.execute(mutators=mset(), stream=io.StringIO(), live=False)
        return out, list(session.db.programs), problem
    finally:
        session.close()


def test_screened_programs_are_stored_but_never_parents_elites_or_dispatched(tmp_path):
    out, rows, _ = _search(tmp_path)
    by_id = {p.id: p for p in rows}
    screened = [p for p in rows if p.status == "screened"]
    assert screened, "a 30-iteration run must screen some children out"
    assert out.summary.screened == sum(1 for p in screened if not p.reused_from)
    for p in screened:
        assert p.correct and not p.member and p.fitness is None and p.cell == ()
        assert "screened out: estimate" in p.insight
    for p in rows:
        if p.iteration >= 0 and not p.migrant:
            assert by_id[p.parent_ids[0]].status == "ok"  # never a screened parent
    pop = Population(rows, 2)
    elites = {e.id for i in range(2) for e in pop.grid(i).values()}
    assert not elites & {p.id for p in screened}
    assert not {e.program for e in out.table} & {p.id for p in screened}
    text, data = read_status(tmp_path / "run")
    assert data["screened"] == out.summary.screened and "screened out" in text


def test_the_threshold_is_the_fitness_to_beat_for_the_island_top(tmp_path):
    _, rows, problem = _search(tmp_path, iterations=16)
    by_hash = {p.code_hash: p for p in rows if p.evaluated_here}
    seen_none = seen_value = False
    for call in problem.calls:
        row = by_hash[code_digest(call["code"])]
        if row.iteration < 0:
            assert call["promote_above"] is None  # the seed is never screened
            continue
        visible = Population([p for p in rows if p.visible_at <= row.iteration], 2)
        expected = promote_threshold(visible, row.island, ELITE_POOL)
        assert call["promote_above"] == expected
        seen_none |= expected is None
        seen_value |= expected is not None
    assert seen_none and seen_value


def test_each_evaluation_carries_the_screen_only_with_a_threshold():
    options = with_cascade(EvalOptions(), ["a"], 1.2)
    assert options.cascade == Cascade(("a",), 1.2)
    assert with_cascade(EvalOptions(), ["a"], None) == EvalOptions()  # no threshold: in full
    cuda = KernelProblem("decode_linear", "cuda", config_from_dict({}))
    assert cuda.screens and cuda.job("x", 1.5).promote_above == 1.5
    off = config_from_dict({"evaluator": {"cascade": "off"}})
    assert not KernelProblem("decode_linear", "cuda", off).screens
    cpu = KernelProblem("decode_linear", "cpu", config_from_dict({}))
    assert not cpu.screens and cpu.job("x", 1.5).promote_above is None
