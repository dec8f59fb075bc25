"""Where a run stands, computed from the database alone (shared by progress, status and
summary.json, so they never disagree).

Counts: `evaluated` programs were run through the evaluator (the seed included; reused
results do not count); of those `valid` were correct and `failed` were not, and `screened` of
the valid ones were kept out of the full evaluation by the evaluator's cascade. Each iteration
is one of: evaluated, `reused` (it repeated code evaluated before, on another island or in
flight, and took that result), `duplicates` (it repeated code its own island already held) or
`rejected` (no program, or the EVOLVE-BLOCK rule broken). `requeued` counts evaluation attempts
lost to a worker or node that died under them and submitted again.

`by_mutator` says what each kind of proposal (`offline:const`, `llm:diff`, ...) did, per
iteration that drew it: `proposed` (iterations), `no_child` (it could not make a program),
`invalid` (children that did not parse or compile: thrown away by the offline mutator before
any evaluation, or rejected by the EVOLVE-BLOCK rule or the evaluator's static check),
`duplicates` (children that repeated a program already tried: skipped by the mutator, or
reused or duplicate rows), `evaluated`, `improved` (evaluated with a fitness above their
parent's).
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
    by_mutator: dict[str, dict[str, int]] = field(default_factory=dict)
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
        by_mutator=mutator_tally(rows, db.meta("discarded", {}) or {}),
        finished=bool(state.get("finished", False)),
        stop_reason=str(state.get("stop_reason", "")),
        error=str(state.get("error", "")),
        running=running,
    )


TALLY = ("proposed", "no_child", "invalid", "duplicates", "evaluated", "improved")


def mutator_tally(rows: list, discarded: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """What each kind of proposal did (see the module docstring)."""
    fitness = {p.id: p.fitness for p in rows}
    out: dict[str, dict[str, int]] = {}
    for p in rows:
        if p.iteration < 0 or p.migrant:
            continue
        t = out.setdefault(p.kind, dict.fromkeys(TALLY, 0))
        t["proposed"] += 1
        if p.status == "rejected":
            t["no_child" if not p.code else "invalid"] += 1
        elif p.reused or p.status == "duplicate":
            t["duplicates"] += 1
        elif p.evaluated_here:
            t["evaluated"] += 1
            if any(r.startswith("static:") for r in p.reasons):
                t["invalid"] += 1
            base = fitness.get(p.parent_ids[0]) if p.parent_ids else None
            if p.fitness is not None and base is not None and p.fitness > base:
                t["improved"] += 1
    for kind, counts in discarded.items():
        t = out.setdefault(kind, dict.fromkeys(TALLY, 0))
        t["invalid"] += int(counts.get("invalid", 0))
        t["duplicates"] += int(counts.get("duplicate", 0))
    return dict(sorted(out.items()))


def format_tally(tally: dict[str, dict[str, int]]) -> list[str]:
    """The tally as table lines (a header first), or [] when nothing was proposed."""
    if not tally:
        return []
    width = max(12, *(len(k) for k in tally))
    head = f"{'mutator':<{width}}  " + "  ".join(f"{c:>10}" for c in TALLY)
    lines = [head]
    for kind, t in tally.items():
        lines.append(f"{kind:<{width}}  " + "  ".join(f"{t[c]:>10}" for c in TALLY))
    return lines
