"""Where a run stands, computed from the database alone (shared by progress, status and
summary.json, so they never disagree).

Counts: `evaluated` programs were run through the evaluator (the seed included; reused
results do not count); of those `valid` were correct and `failed` were not, and `screened` of
the valid ones were kept out of the full evaluation by the evaluator's cascade. Each iteration
is one of: evaluated, `reused` (it repeated code evaluated before, on another island or in
flight, and took that result), `duplicates` (it repeated code its own island already held) or
`rejected` (no program, or the EVOLVE-BLOCK rule broken). `requeued` counts evaluation attempts
lost to a worker or node that died under them and submitted again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from evokernel.evolve.database import Database
from evokernel.evolve.islands import Population


@dataclass
class RunSummary:
    task: str
    device: str
    fitness_label: str
    iterations_done: int
    iterations_target: int
    evaluated: int
    valid: int
    failed: int
    rejected: int
    duplicates: int
    reused: int
    screened: int
    requeued: int
    migrants: int
    islands: list[int]  # member programs per island
    cells: list[int]  # occupied grid cells per island
    best: dict[str, Any] | None  # id, fitness, regimes, island, iteration, kind
    tokens: int
    cost_usd: float
    by_model: dict[str, dict[str, float]] = field(default_factory=dict)
    finished: bool = False
    stop_reason: str = ""
    error: str = ""  # why the last session ended with an error
    running: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(db: Database, running: bool = False) -> RunSummary:
    rows = db.programs
    n_islands = int(db.meta("islands", 1))
    pop = Population(rows, n_islands)
    best = pop.best()
    by_model: dict[str, dict[str, float]] = {}
    for p in rows:
        for u in p.usage:
            m = by_model.setdefault(u.model, {"prompt_tokens": 0, "completion_tokens": 0})
            m["prompt_tokens"] += u.prompt_tokens
            m["completion_tokens"] += u.completion_tokens
            m["cost_usd"] = m.get("cost_usd", 0.0) + u.cost_usd
    state = db.meta("state", {})
    return RunSummary(
        task=str(db.meta("name", "")),
        device=str(db.meta("device", "")),
        fitness_label=str(db.meta("fitness_label", "")),
        iterations_done=sum(1 for p in rows if p.iteration >= 0 and not p.migrant),
        iterations_target=int(db.meta("iterations_target", 0)),
        evaluated=sum(1 for p in rows if p.evaluated_here),
        valid=sum(1 for p in rows if p.evaluated_here and p.correct),
        failed=sum(1 for p in rows if p.evaluated_here and not p.correct),
        rejected=sum(1 for p in rows if p.status == "rejected"),
        duplicates=sum(1 for p in rows if p.status == "duplicate"),
        reused=sum(1 for p in rows if p.reused),
        screened=sum(1 for p in rows if p.evaluated_here and p.status == "screened"),
        requeued=sum(
            max(0, int(p.evaluated_on.get("attempts", 1)) - 1) for p in rows if p.evaluated_here
        ),
        migrants=sum(1 for p in rows if p.migrant),
        islands=[len(pop.island(i)) for i in range(n_islands)],
        cells=[len(pop.grid(i)) for i in range(n_islands)],
        best=None
        if best is None
        else {
            "id": best.id,
            "fitness": best.fitness,
            "regimes": best.regimes,
            "island": best.island,
            "iteration": best.iteration,
            "kind": best.kind,
        },
        tokens=sum(p.tokens for p in rows),
        cost_usd=round(sum(p.cost_usd for p in rows), 6),
        by_model=by_model,
        finished=bool(state.get("finished", False)),
        stop_reason=str(state.get("stop_reason", "")),
        error=str(state.get("error", "")),
        running=running,
    )
