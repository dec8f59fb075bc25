"""The search loop on a fake problem (no processes): islands, migration, elites, dedup,
determinism, resume and budgets."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from evolve_fakes import SEED, FakeProblem, KnobMutator, mset

from evokernel.errors import EvokernelError
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.database import Program
from evokernel.evolve.islands import Population, rank_key
from evokernel.evolve.session import Outcome, create_session, resume_session
from evokernel.evolve.types import BudgetExceeded, MutationContext, Proposal


def _cfg(**over):
    base = {
        "islands": {"count": 3, "migration_interval": 2, "migration_count": 1},
        "budget": {"iterations": 14},
        "checkpoint": {"write_sources": False},
    }
    for key, value in over.items():
        base.setdefault(key, {})
        if isinstance(value, dict):
            base[key].update(value)
        else:
            base[key] = value
    return config_from_dict(base)


def _run(path: Path, cfg, problem=None, mutator=None) -> tuple[Outcome, list[Program]]:
    problem = problem or FakeProblem()
    session = create_session(path, problem, cfg)
    try:
        out = session.execute(mutators=mset(mutator), stream=io.StringIO(), live=False)
        return out, list(session.db.programs)
    finally:
        session.close()


def _iters(rows: list[Program]) -> list[Program]:
    return sorted(
        (p for p in rows if p.iteration >= 0 and not p.migrant), key=lambda p: p.iteration
    )


def test_islands_round_robin_and_parents_from_own_island(tmp_path):
    mutator = KnobMutator()
    out, rows = _run(tmp_path / "r", _cfg(), mutator=mutator)
    assert out.stop_reason == "iterations"
    its = _iters(rows)
    assert [p.iteration for p in its] == list(range(14))
    by_id = {p.id: p for p in rows}
    for p in its:
        assert p.island == p.iteration % 3
        assert by_id[p.parent_ids[0]].island == p.island
    for ctx in mutator.contexts:
        assert ctx.parent.island == ctx.iteration % 3 and ctx.parent.correct
    seeds = [p for p in rows if p.kind == "seed"]
    assert sorted(p.island for p in seeds) == [0, 1, 2]
    assert out.summary.islands == [
        sum(1 for p in rows if p.member and p.island == i) for i in range(3)
    ]
    assert all(n > 1 for n in out.summary.islands)


def test_migration_on_the_ring_at_the_interval(tmp_path):
    _, rows = _run(tmp_path / "r", _cfg(budget={"iterations": 13}))
    migrants = [p for p in rows if p.migrant]
    assert migrants, "a migration must have happened"
    assert {p.iteration for p in migrants} <= {6, 12}
    by_id = {p.id: p for p in rows}
    for m in migrants:
        origin = by_id[m.parent_ids[0]]
        assert m.island == (origin.island + 1) % 3
        assert m.code_hash == origin.code_hash and m.fitness == origin.fitness
        assert m.reused_from and not by_id[m.reused_from].reused_from
        # a migrant is one of its source island's best programs at the boundary
        before = Population([p for p in rows if p.iteration < m.iteration], 3)
        top = before.ranked(origin.island)[0]
        assert origin.fitness == top.fitness or origin in before.ranked(origin.island)
    for island in range(3):
        hashes = [p.code_hash for p in rows if p.member and p.island == island]
        assert len(hashes) == len(set(hashes)), "an island never holds the same code twice"


def test_elites_never_lost_and_replaced_only_by_better(tmp_path):
    _, rows = _run(tmp_path / "r", _cfg(budget={"iterations": 20}))
    previous = None
    best_prev = None
    for k in range(0, 22):
        pop = Population(rows, 3, cutoff=k)
        grids = [pop.grid(i) for i in range(3)]
        if previous is not None:
            for i in range(3):
                for cell, elite in previous[i].items():
                    now = grids[i][cell]
                    assert rank_key(now) <= rank_key(elite)
                    assert now.fitness >= elite.fitness
        best = pop.best()
        if best_prev is not None:
            assert best.fitness >= best_prev.fitness
        previous, best_prev = grids, best


def test_duplicates_are_never_evaluated_twice(tmp_path):
    problem = FakeProblem()
    out, rows = _run(tmp_path / "r", _cfg(budget={"iterations": 30}), problem=problem)
    from evokernel.evolve.types import code_digest

    digests = [code_digest(c) for c in problem.evaluated]
    assert len(digests) == len(set(digests))
    assert out.summary.evaluated == len(digests)
    reused = [p for p in rows if p.reused_from and not p.migrant and p.iteration >= 0]
    assert reused, "30 iterations over a 24-program space must repeat some code"
    by_id = {p.id: p for p in rows}
    for p in reused:
        assert by_id[p.reused_from].code_hash == p.code_hash


def _signature(rows):
    return [(p.id, p.island, p.parent_ids, p.code_hash, p.status) for p in _iters(rows)]


def test_same_seed_same_programs_in_the_same_order(tmp_path):
    _, a = _run(tmp_path / "a", _cfg(seed=7))
    _, b = _run(tmp_path / "b", _cfg(seed=7))
    _, c = _run(tmp_path / "c", _cfg(seed=8))
    assert _signature(a) == _signature(b)
    assert _signature(a) != _signature(c)


class JitterProblem(FakeProblem):
    """Evaluations finish in a random order."""

    def evaluate(self, code, **kwargs):
        import time

        time.sleep(random.random() * 0.03)
        return super().evaluate(code, **kwargs)


class SlowMutator(KnobMutator):
    """Proposals (like LLM calls) take a random time and overlap evaluations."""

    def propose(self, ctx: MutationContext) -> Proposal:
        import time

        proposal = super().propose(ctx)
        time.sleep(random.random() * 0.03)
        return proposal


def test_parallel_runs_are_deterministic(tmp_path):
    cfg = _cfg(
        seed=3,
        in_flight=3,
        evaluator={"workers": 3},
        budget={"iterations": 15},
        llm={"max_concurrency": 3},
    )
    _, a = _run(tmp_path / "a", cfg, problem=JitterProblem(), mutator=SlowMutator())
    _, b = _run(tmp_path / "b", cfg, problem=JitterProblem(), mutator=SlowMutator())
    assert _signature(a) == _signature(b)
    for p in _iters(a):  # iteration k saw only iterations <= k - 3
        parent = next(q for q in a if q.id == p.parent_ids[0])
        assert parent.visible_at <= p.iteration


def test_rows_are_committed_in_iteration_order_whatever_finishes_first(tmp_path):
    cfg = _cfg(seed=2, in_flight=4, evaluator={"workers": 4}, budget={"iterations": 16})
    _, rows = _run(tmp_path / "r", cfg, problem=JitterProblem(), mutator=SlowMutator())
    order = [p.iteration for p in rows if p.iteration >= 0 and not p.migrant]
    assert order == list(range(16))


class SameChildMutator(KnobMutator):
    """Every island's first child is the same program."""

    def propose(self, ctx: MutationContext) -> Proposal:
        code = ctx.parent.code.replace("A = 1  #", "A = 2  #")
        return Proposal(code=code, kind="test:same", description="A 1 -> 2")


def test_reused_evaluations_are_counted(tmp_path):
    problem = FakeProblem()
    out, _ = _run(tmp_path / "r", _cfg(budget={"iterations": 3}), problem, SameChildMutator())
    assert len(problem.evaluated) == 2  # the seed and the one child
    assert out.summary.evaluated == 2 and out.summary.reused == 2
    assert out.summary.duplicates == 0 and out.summary.rejected == 0
    assert "2 evaluated (2 valid, 0 failed), 2 reused" in out.text()


def test_resume_continues_exactly(tmp_path):
    _, straight = _run(tmp_path / "straight", _cfg(seed=5, budget={"iterations": 14}))
    _run(tmp_path / "split", _cfg(seed=5, budget={"iterations": 5}))
    session = resume_session(tmp_path / "split", iterations=14, problem=FakeProblem())
    try:
        out = session.execute(mutators=mset(), stream=io.StringIO(), live=False)
        split = list(session.db.programs)
    finally:
        session.close()
    assert out.summary.iterations_done == 14
    assert _signature(split) == _signature(straight)


def test_resume_of_finished_run_just_reports(tmp_path):
    _run(tmp_path / "r", _cfg(budget={"iterations": 4}))
    session = resume_session(tmp_path / "r", problem=FakeProblem())
    stream = io.StringIO()
    try:
        out = session.execute(mutators=mset(), stream=stream, live=False)
    finally:
        session.close()
    assert "already finished" in stream.getvalue()
    assert out.summary.iterations_done == 4


def test_token_budget_stops_cleanly(tmp_path):
    out, _ = _run(
        tmp_path / "r", _cfg(budget={"iterations": 20, "tokens": 450}), mutator=KnobMutator(100)
    )
    assert out.stop_reason == "tokens" and out.summary.finished
    assert out.summary.iterations_done == 3  # 200 tokens each: stops once 450 are spent
    assert out.summary.tokens == 600


def test_wall_time_budget_stops_and_resumes(tmp_path):
    cfg = _cfg(budget={"iterations": 40, "wall_time_s": 0.6})
    out, _ = _run(tmp_path / "r", cfg, problem=FakeProblem(delay_s=0.15))
    assert out.stop_reason == "wall-time" and not out.summary.finished
    assert 1 <= out.summary.iterations_done < 40


class BudgetMutator(KnobMutator):
    def propose(self, ctx: MutationContext) -> Proposal:
        if ctx.iteration >= 2:
            raise BudgetExceeded("token budget spent")
        return super().propose(ctx)


def test_budget_exceeded_from_a_mutator_stops(tmp_path):
    out, _ = _run(tmp_path / "r", _cfg(), mutator=BudgetMutator())
    assert out.stop_reason == "budget" and out.summary.iterations_done == 2


class BadEditMutator(KnobMutator):
    def propose(self, ctx: MutationContext) -> Proposal:
        if ctx.iteration % 3 == 0:
            return Proposal(code=None, kind="test:none", error="diff did not apply")
        if ctx.iteration % 3 == 1:
            code = ctx.parent.code.replace("def entry(x):", "def entry(x, y=0):")
            return Proposal(code=code, kind="test:outside")
        return super().propose(ctx)


def test_rejected_proposals_are_recorded_not_evaluated(tmp_path):
    problem = FakeProblem()
    out, rows = _run(tmp_path / "r", _cfg(budget={"iterations": 6}), problem, BadEditMutator())
    rejected = [p for p in rows if p.status == "rejected"]
    assert len(rejected) == 4 and out.summary.rejected == 4
    assert any("diff did not apply" in p.reasons[0] for p in rejected)
    assert any("outside the EVOLVE-BLOCK" in p.reasons[0] for p in rejected)
    assert all("def entry(x, y=0)" not in c for c in problem.evaluated)


def test_failures_feed_insights_and_last_failure(tmp_path):
    mutator = KnobMutator(broken_every=2)
    out, rows = _run(tmp_path / "r", _cfg(budget={"iterations": 8}), mutator=mutator)
    failed = [p for p in rows if p.status == "failed"]
    assert failed and out.summary.failed == len(failed)
    assert all(p.fitness is None and "mismatch" in p.reasons[0] for p in failed)
    last = mutator.contexts[-1]
    assert any("failed: mismatch" in line for line in last.insights)
    ok = next(p for p in _iters(rows) if p.status == "ok")
    assert "short" in ok.insight and "->" in ok.insight


def test_seed_that_fails_stops_the_run(tmp_path):
    problem = FakeProblem(seed_code=SEED.replace("return x * A", "return x * A  # BROKEN"))
    with pytest.raises(EvokernelError, match="seed program is not correct"):
        _run(tmp_path / "r", _cfg(), problem=problem)


def test_existing_run_dir_is_refused(tmp_path):
    _run(tmp_path / "r", _cfg(budget={"iterations": 1}))
    with pytest.raises(EvokernelError, match="--resume"):
        _run(tmp_path / "r", _cfg())
    with pytest.raises(EvokernelError, match="no such run directory"):
        resume_session(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvokernelError, match="holds no run to resume"):
        resume_session(tmp_path / "empty")


def test_dispatch_never_picks_a_scenario_loser(tmp_path):
    out, rows = _run(tmp_path / "r", _cfg(budget={"iterations": 24}))
    from evolve_fakes import speedups

    progs = [p for p in rows if p.evaluated_here and p.correct]
    for e in out.table:
        lowers = {p.id: speedups(p.code)[e.scenario] * 0.98 for p in progs}
        if e.program == "baseline":
            assert max(lowers.values()) <= 1.0
        else:
            assert e.speedup_ci[0] > 1.0
            assert lowers[e.program] == pytest.approx(max(lowers.values()))
    assert any(e.program != "baseline" for e in out.table)
    doc = (tmp_path / "r" / "dispatch.json").read_text()
    assert "s_long_1" in doc
    assert (tmp_path / "r" / "best.py").read_text() == next(
        p.code for p in rows if p.id == out.summary.best["id"]
    )


class CrashingMutator(KnobMutator):
    def propose(self, ctx: MutationContext) -> Proposal:
        if ctx.iteration == 1:
            raise ValueError("bug in a mutator")
        return super().propose(ctx)


def test_a_crashing_mutator_costs_one_iteration_not_the_run(tmp_path):
    out, rows = _run(tmp_path / "r", _cfg(budget={"iterations": 4}), mutator=CrashingMutator())
    assert out.summary.iterations_done == 4
    (bad,) = [p for p in rows if p.status == "rejected"]
    assert bad.iteration == 1 and "ValueError: bug in a mutator" in bad.reasons[0]
