"""The search loop: propose, check, evaluate, store, in iteration order, resumable.

Iteration k works on island k mod n (round robin). Its proposal sees the rows visible at k:
those with `visible_at <= k`, where an iteration's row becomes visible `lag` iterations later
(`lag` = the number of iterations in flight at once, `in_flight`). Iteration k is launched
only when every iteration <= k - lag is committed; proposals are accepted (deduplicated, sent
to evaluation) and rows are committed strictly in iteration order, whatever order the
backend's evaluations finish in. So what iteration k proposes depends only on the seed, k and
the committed rows: with the same seed, config, `in_flight` and a deterministic mutator, two
runs hold the same programs in the same order, on any backend, and a resumed run redoes a
lost iteration exactly.

Random draws come from `random.Random(f"{seed}:{k}:{purpose}")`; nothing random is carried
from one iteration to the next, so there is no RNG state to checkpoint. The checkpoint is the
database commit made for every iteration (row + run state in one transaction).

Evaluations go to an evaluation backend (`backends/`: this machine's GPUs, or a Ray cluster);
the controller never knows which. When the problem screens (the evaluator's cascade, on
cuda), iteration k's evaluation carries the fitness its program must beat to enter the top of
its island as the proposal saw it (`cascade.promote_threshold`); a program screened out is
stored as "screened" and never becomes a parent.

Before iteration k = m * islands * migration_interval (m >= 1) the loop drains the iterations
in flight and migrates each island's elites to the next island on the ring.

A proposal that repeats code already evaluated reuses that evaluation (waiting for it if it is
still running): the same program is never evaluated twice. Budgets (iterations, wall time,
tokens, cost) stop the launching of new iterations; iterations in flight finish and are stored.
An interrupt stops at once: iterations in flight are lost, and `--resume` redoes them. So does
a `BackendError` (the backend cannot evaluate at all), which ends the session with its line.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, replace

from evokernel.errors import EvokernelError
from evokernel.evolve.backends.base import Backend, Evaluation
from evokernel.evolve.cascade import SCREENED, is_screened, promote_threshold
from evokernel.evolve.config import SearchConfig
from evokernel.evolve.database import Database, Program
from evokernel.evolve.insights import insight_line, last_failure, recent_insights
from evokernel.evolve.islands import Population
from evokernel.evolve.map_elites import FeatureSpace
from evokernel.evolve.mutators.registry import MutatorSet
from evokernel.evolve.problem import Problem
from evokernel.evolve.rundir import RunDir, atomic_write
from evokernel.evolve.threads import DaemonThreads
from evokernel.evolve.types import (
    BudgetExceeded,
    MutationContext,
    ProgramView,
    Proposal,
    code_digest,
)
from evokernel.reasons import reason_code
from evokernel.tasks import blocks

SEED_ID = "seed"
NOT_THE_CANDIDATES = {"infrastructure", "budget"}  # reason codes that say nothing of a program
FINISHING = ("iterations", "tokens", "cost", "budget", "patience")  # reasons that end a run
# "tokens"/"cost": the proposals' reported usage reached budget.tokens/cost_usd; "budget": the
# LLM accounting (which also counts failed requests) refused or reached a limit.


HISTORY_MAX = 512  # newest measured programs a mutator sees
NO_CHILD = "no-child"  # stop reason: no mutator could propose any program
NO_CHILD_PATIENCE = 8  # iterations without a single child, from the start, before giving up


def measured_history(visible: list[Program]) -> list[ProgramView]:
    """Distinct measured programs (with a fitness), oldest first, at most HISTORY_MAX."""
    distinct = {p.code_hash: p for p in visible if p.fitness is not None and p.code}
    rows = sorted(distinct.values(), key=lambda p: p.iteration)[-HISTORY_MAX:]
    return [p.view() for p in rows]


def failed_history(visible: list[Program]) -> list[ProgramView]:
    """Distinct programs whose evaluation failed, oldest first, at most HISTORY_MAX."""
    distinct = {p.code_hash: p for p in visible if p.status == "failed" and p.code}
    rows = sorted(distinct.values(), key=lambda p: p.iteration)[-HISTORY_MAX:]
    return [p.view() for p in rows]


class SeedFailed(EvokernelError):
    """The seed program is incorrect: there is nothing to evolve from."""


@dataclass
class InFlight:
    """One iteration between its launch and its commit."""

    k: int
    island: int
    parent: Program
    mutator: str
    proposal_future: Future[Proposal]
    promote_above: float | None = None  # the cascade's threshold for this iteration's program
    state: str = "proposing"  # proposing | evaluating | waiting | ready
    proposal: Proposal | None = None
    digest: str = ""
    eval_future: Future[Evaluation] | None = None
    wait_on: int = -1  # the iteration whose evaluation this one reuses
    duplicate: bool = False
    created_at: float = 0.0
    row: Program | None = None  # state "ready": the row to commit
    result_json: str | None = None


class Controller:
    def __init__(
        self,
        db: Database,
        run: RunDir,
        problem: Problem,
        cfg: SearchConfig,
        mutators: MutatorSet,
        space: FeatureSpace,
        *,
        lag: int,
        backend: Backend,
        on_commit: Callable[[int], None] | None = None,
    ):
        self.db, self.run_dir, self.problem, self.cfg, self.space = db, run, problem, cfg, space
        self.mutators = mutators
        self.backend = backend
        self.lag = max(1, lag)
        self.n = cfg.islands.count
        self.on_commit = on_commit or (lambda in_flight: None)
        self.propose_threads = DaemonThreads(
            max(1, min(self.lag, cfg.llm.max_concurrency)), "propose"
        )
        self.flight: dict[int, InFlight] = {}
        self.stop: str | None = None
        self.tokens = sum(p.tokens for p in db.programs)
        self.cost = sum(p.cost_usd for p in db.programs)
        self.hardware: dict = {}
        self.budget_message = ""
        # Children mutators threw away before proposing (did not compile, already tried), by
        # proposal kind: {kind: {"invalid": n, "duplicate": m}}, kept in the run's meta.
        self.discarded: dict[str, dict[str, int]] = db.meta("discarded", {}) or {}
        # Iterations in a row whose mutator proposed no program (an LLM that cannot be reached,
        # a program no mutator can change): the run stops when nothing was ever proposed.
        self.no_child_streak = 0

    # --- the seed ----------------------------------------------------------------------------
    def ensure_seed(self) -> None:
        """Evaluate the seed once and place a copy on every island."""
        if SEED_ID not in self.db:
            code = self.problem.seed_code
            evaluation = self.backend.submit(self.problem, code).result()
            codes = {reason_code(r) for r in evaluation.result.reasons}
            if codes and codes <= NOT_THE_CANDIDATES:
                # Nothing was learned about the seed: store nothing, so --resume retries it.
                raise EvokernelError(
                    "the seed could not be evaluated (not its fault): "
                    + "; ".join(evaluation.result.reasons)[:500]
                )
            seed = self._evaluated_row(
                Program(
                    id=SEED_ID,
                    iteration=-1,
                    island=0,
                    generation=0,
                    parent_ids=(),
                    kind="seed",
                    description="the starting program",
                    status="",
                    code=code,
                    code_hash=code_digest(code),
                    visible_at=0,
                ),
                evaluation,
            )
            copies = [
                replace(
                    seed,
                    id=f"{SEED_ID}@{i}",
                    island=i,
                    reused_from=SEED_ID,
                    insight="",
                    evaluated_on={},
                )
                for i in range(1, self.n)
            ]
            rows = [(seed, evaluation.result.to_json()), *((c, None) for c in copies)]
            self._write_sources([seed])
            self.db.commit(rows)
        seed = self.db.get(SEED_ID)
        if not seed.correct:
            raise SeedFailed(
                f"the seed program is not correct, nothing to evolve from: "
                f"{'; '.join(seed.reasons) or 'no reason given'}"
            )
        seed_result = self.db.result(SEED_ID)
        self.hardware = self.problem.hardware(seed_result)
        if seed_result is not None:
            label = self.problem.label_for(seed_result)
            if label != self.db.meta("fitness_label"):
                self.db.commit(meta={"fitness_label": label})

    # --- the loop ----------------------------------------------------------------------------
    def run(self, target: int, wall_time_s: float = 0.0) -> str:
        """Run iterations [0, target) not yet stored; returns why it stopped."""
        start = time.monotonic()
        done = {p.iteration for p in self.db.programs if p.iteration >= 0 and not p.migrant}
        # Lazy: a huge target costs nothing until its iterations are reached.
        pending: Iterator[int] = (k for k in range(target) if k not in done)
        k = next(pending, None)
        self.stop = None
        try:
            while True:
                self.stop = self.stop or self._budget_stop(start, wall_time_s)
                while self.stop is None and k is not None and self._may_launch(k):
                    self._launch(k)
                    k = next(pending, None)
                if not self.flight:
                    break
                self._step()
                futures = [f for s in self.flight.values() for f in self._futures(s)]
                if futures:
                    wait(futures, timeout=1.0, return_when=FIRST_COMPLETED)
                self._step()
            if self.stop is None:
                self.stop = "iterations"
        except KeyboardInterrupt:
            self.stop = "interrupted"
        return self.stop

    def _step(self) -> None:
        self._accept_ready()
        self._collect()
        self._commit_ready()

    def _futures(self, s: InFlight) -> list[Future]:
        if s.state == "proposing":
            return [s.proposal_future]
        if s.state == "evaluating" and s.eval_future is not None:
            return [s.eval_future]
        return []

    def _budget_stop(self, start: float, wall_time_s: float) -> str | None:
        budget = self.cfg.budget
        if wall_time_s and time.monotonic() - start >= wall_time_s:
            return "wall-time"
        if budget.tokens and self.tokens >= budget.tokens:
            return "tokens"
        if budget.cost_usd and self.cost >= budget.cost_usd:
            return "cost"
        spent = self.mutators.accounting.exhausted()
        if spent:
            self.budget_message = spent
            return "budget"
        if budget.patience and self._stalled(budget.patience, budget.min_improvement):
            self.budget_message = (
                f"no better program in {budget.patience} iterations (budget.patience)"
            )
            return "patience"
        return None

    def _stalled(self, patience: int, min_improvement: float) -> bool:
        """Whether the best fitness rose by more than `min_improvement` in the last `patience`
        committed iterations (OpenEvolve's early stopping)."""
        rows = sorted(
            (p for p in self.db.programs if not p.migrant and p.iteration >= -1),
            key=lambda p: p.iteration,
        )
        best, last = None, -1
        for p in rows:
            if p.fitness is not None and (best is None or p.fitness > best + min_improvement):
                best, last = p.fitness, p.iteration
        latest = rows[-1].iteration if rows else -1
        return latest - last >= patience

    def _is_boundary(self, k: int) -> bool:
        period = self.n * self.cfg.islands.migration_interval
        return self.n > 1 and k > 0 and k % period == 0

    def _may_launch(self, k: int) -> bool:
        if len(self.flight) >= self.lag:
            return False
        if self._is_boundary(k) and k not in self.db.meta("migrations", []):
            if self.flight:
                return False  # drain first: migration sees every iteration before k
            self._migrate(k)
        return all(j > k - self.lag for j in self.flight)

    def _rng(self, k: int, purpose: str) -> random.Random:
        return random.Random(f"{self.cfg.seed}:{k}:{purpose}")

    def _launch(self, k: int) -> None:
        visible = [p for p in self.db.programs if p.visible_at <= k]
        pop = Population(visible, self.n)
        island = k % self.n
        rng = self._rng(k, "select")
        parent = pop.select_parent(island, rng, self.cfg.selection).parent
        inspirations = pop.inspirations(parent, rng, self.cfg.selection.inspirations)
        mutator = self.mutators.choose(rng)
        ctx = MutationContext(
            task_name=self.problem.name,
            task_interface=self.problem.interface,
            task_description=self.problem.description,
            device=self.problem.device,
            hardware=dict(self.hardware),
            parent=parent.view(self.db.result(parent.id)),
            inspirations=[p.view(self.db.result(p.id)) for p in inspirations],
            insights=recent_insights(visible, self.cfg.mutators.prompt.max_insights),
            rng=self._rng(k, "mutate"),
            iteration=k,
            last_failure=last_failure(visible, parent.id),
            seen=frozenset(p.code_hash for p in visible if p.code),
            history=measured_history(visible),
            failed=failed_history(visible),
        )
        threshold = None
        if self.problem.screens:
            threshold = promote_threshold(pop, island, self.cfg.selection.elite_pool)
        future = self.propose_threads.submit(mutator.propose, ctx)
        self.flight[k] = InFlight(
            k, island, parent, mutator.name, future, threshold, created_at=time.time()
        )

    # --- accepting proposals, in iteration order -------------------------------------------
    def _accept_ready(self) -> None:
        for k in sorted(self.flight):
            slot = self.flight[k]
            if slot.state != "proposing":
                continue
            if not slot.proposal_future.done():
                return
            self._accept(slot)

    def _accept(self, slot: InFlight) -> None:
        try:
            prop = slot.proposal_future.result()
        except BudgetExceeded as err:
            del self.flight[slot.k]  # nothing was spent; the iteration stays to do
            self.stop = self.stop or "budget"
            self.budget_message = str(err)
            return
        except Exception as err:
            msg = f"mutator {slot.mutator} raised {type(err).__name__}: {err}"
            prop = Proposal(code=None, kind=slot.mutator, error=" ".join(msg.split()))
        slot.proposal = prop
        if prop.code is None:
            return self._ready(slot, self._rejected(slot, prop.error or "no program proposed"))
        reason = blocks.check_edit(slot.parent.code, prop.code)
        limit = self.cfg.mutators.max_code_chars
        if reason is None and limit and len(prop.code) > limit:
            reason = f"the child has {len(prop.code)} characters, over max_code_chars {limit}"
        if reason is not None:
            return self._ready(slot, self._rejected(slot, reason, prop.code))
        slot.digest = code_digest(prop.code)
        slot.duplicate = self._island_holds(slot.island, slot.digest, slot.k)
        source = self._source(slot.digest, slot.k)
        if isinstance(source, Program):
            self._ready(slot, self._reused_row(slot, source))
        elif source is not None:
            slot.state, slot.wait_on = "waiting", source
        else:
            slot.state = "evaluating"
            slot.eval_future = self.backend.submit(self.problem, prop.code, slot.promote_above)

    def _source(self, digest: str, k: int) -> Program | int | None:
        """The evaluated row (or the iteration in flight) holding this code before k."""
        for p in self.db.programs:
            if p.code_hash == digest and p.evaluated_here and p.iteration < k:
                return p
        for j, s in sorted(self.flight.items()):
            if j >= k or s.digest != digest:
                continue
            if s.state == "evaluating":
                return j
            if s.state == "ready" and s.result_json is not None and s.row is not None:
                return s.row  # evaluated, waiting for an earlier iteration's commit
        return None

    def _island_holds(self, island: int, digest: str, k: int) -> bool:
        for p in self.db.programs:
            mine = p.island == island and p.member and p.code_hash == digest
            if mine and (p.iteration < k or (p.migrant and p.iteration <= k)):
                return True
        return any(
            j < k and s.island == island and s.digest == digest and not s.duplicate
            for j, s in self.flight.items()
            if s.state in ("evaluating", "waiting")
            or (s.state == "ready" and s.row is not None and s.row.member)
        )

    # --- evaluations -------------------------------------------------------------------------
    def _collect(self) -> None:
        for k in sorted(self.flight):
            slot = self.flight[k]
            if slot.state != "evaluating" or slot.eval_future is None:
                continue
            if not slot.eval_future.done():
                continue
            evaluation = slot.eval_future.result()  # BackendError: the session ends
            row = self._evaluated_row(self._base_row(slot), evaluation)
            self._ready(slot, row, evaluation.result.to_json())
            for other in self.flight.values():
                if other.state == "waiting" and other.wait_on == k:
                    self._ready(other, self._reused_row(other, row))

    # --- commits, in iteration order ----------------------------------------------------------
    def _ready(self, slot: InFlight, row: Program, result_json: str | None = None) -> None:
        slot.state, slot.row, slot.result_json = "ready", row, result_json

    def _commit_ready(self) -> None:
        while self.flight:
            slot = self.flight[min(self.flight)]
            if slot.state != "ready" or slot.row is None:
                return
            self._commit(slot, slot.row, slot.result_json)

    def _commit(self, slot: InFlight, row: Program, result_json: str | None = None) -> None:
        self._write_sources([row], slot.proposal)
        meta: dict = {"accounting": self.mutators.accounting.to_dict()}
        prop = slot.proposal
        if prop is not None and prop.discarded:
            tally = self.discarded.setdefault(row.kind, {})
            for why, n in prop.discarded.items():
                tally[why] = tally.get(why, 0) + n
            meta["discarded"] = self.discarded
        self._note_proposal(row)
        self.db.commit([(row, result_json)], meta)
        self.tokens += row.tokens
        self.cost += row.cost_usd
        del self.flight[slot.k]
        self.on_commit(len(self.flight))

    def _note_proposal(self, row: Program) -> None:
        if row.status == "rejected" and not row.code:
            self.no_child_streak += 1
            ever = any(p.code and p.iteration >= 0 and not p.migrant for p in self.db.programs)
            if not ever and self.no_child_streak >= NO_CHILD_PATIENCE:
                self.stop = self.stop or NO_CHILD
        else:
            self.no_child_streak = 0

    # --- rows --------------------------------------------------------------------------------
    def _base_row(self, slot: InFlight, code: str | None = None) -> Program:
        prop = slot.proposal
        assert prop is not None
        parents = tuple(prop.parent_ids) or (slot.parent.id,)
        gen = max((self.db.get(p).generation for p in parents if p in self.db), default=0) + 1
        code = prop.code if code is None else code
        return Program(
            id=f"p{slot.k:04d}",
            iteration=slot.k,
            island=slot.island,
            generation=gen,
            parent_ids=parents,
            kind=prop.kind or slot.mutator,
            description=" ".join(prop.description.split()),
            status="",
            code=code or "",
            code_hash=code_digest(code) if code else "",
            visible_at=slot.k + self.lag,
            prompt_digest=prop.prompt_digest,
            response_digest=prop.response_digest,
            usage=tuple(prop.usage),
            tokens=sum(u.prompt_tokens + u.completion_tokens for u in prop.usage),
            cost_usd=sum(u.cost_usd for u in prop.usage),
            created_at=slot.created_at,
        )

    def _evaluated_row(self, row: Program, evaluation: Evaluation) -> Program:
        result = evaluation.result
        screened = is_screened(result)
        regimes = self.problem.regime_speedups(result)
        features = self.space.values(regimes, row.code, self.problem.features(result))
        if screened:
            # Timed on the screen scenarios only: no fitness, no cell, never a parent.
            row.status, row.fitness, row.cell = SCREENED, None, ()
        else:
            row.status = "ok" if result.correct else "failed"
            row.fitness = self.problem.fitness(result)
            cell = self.space.cell(features, self._metric_ranges())
            row.cell = cell if row.fitness is not None else ()
        row.regimes = regimes
        row.features = features
        row.reasons = tuple(result.reasons)
        row.eval_wall_s = evaluation.wall_s
        row.evaluated_on = evaluation.record()
        return self._with_insight(row, result.artifacts.get("cascade", "") if screened else "")

    def _metric_ranges(self) -> dict[str, tuple[float, float]]:
        """Each metric feature's (min, max) over the committed rows (OpenEvolve's scaling)."""
        ranges: dict[str, tuple[float, float]] = {}
        for key in self.space.metric_keys():
            seen = [
                float(p.features[key])
                for p in self.db.programs
                if isinstance(p.features.get(key), (int, float)) and p.fitness is not None
            ]
            if seen:
                ranges[key] = (min(seen), max(seen))
        return ranges

    def _reused_row(self, slot: InFlight, source: Program) -> Program:
        row = self._base_row(slot)
        row.status = "duplicate" if slot.duplicate else source.status
        row.reused_from = source.reused_from or source.id
        row.fitness, row.regimes, row.features = source.fitness, source.regimes, source.features
        row.cell, row.reasons = source.cell, source.reasons
        return self._with_insight(row)

    def _rejected(self, slot: InFlight, reason: str, code: str = "") -> Program:
        row = self._base_row(slot, code=code)
        row.status = "rejected"
        row.reasons = (" ".join(reason.split()),)
        return self._with_insight(row)

    def _with_insight(self, row: Program, note: str = "") -> Program:
        parent = self.db.get(row.parent_ids[0]) if row.parent_ids else None
        row.insight = insight_line(row, parent, self.problem.fitness_kind, note)
        return row

    def _write_sources(self, rows: list[Program], prop: Proposal | None = None) -> None:
        for row in rows:
            if self.cfg.checkpoint.write_sources and row.code:
                atomic_write(self.run_dir.program_file(row.id), row.code)
            if prop is not None and prop.prompt:
                atomic_write(self.run_dir.llm_file(row.id, "prompt"), prop.prompt)
            if prop is not None and prop.response:
                atomic_write(self.run_dir.llm_file(row.id, "response"), prop.response)

    # --- migration ---------------------------------------------------------------------------
    def _migrate(self, k: int) -> None:
        pop = Population([p for p in self.db.programs if p.iteration < k], self.n)
        rows = []
        for p, target in pop.migration(self.cfg.islands.migration_count):
            source = p.reused_from or p.id
            rows.append(
                replace(
                    p,
                    id=f"{source}@{target}",
                    iteration=k,
                    island=target,
                    parent_ids=(p.id,),
                    kind="migrant",
                    description=f"migrant from island {p.island}",
                    reused_from=source,
                    migrant=True,
                    visible_at=k,
                    insight="",
                    usage=(),
                    tokens=0,
                    cost_usd=0.0,
                    prompt_digest="",
                    response_digest="",
                    created_at=0.0,
                    evaluated_on={},
                )
            )
        migrations = [*self.db.meta("migrations", []), k]
        self.db.commit([(r, None) for r in rows], {"migrations": migrations})
