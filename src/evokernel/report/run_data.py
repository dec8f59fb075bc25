"""A run directory, read once (read-only) into the records the run report draws.

`load_run(path)` opens RUN_DIR/programs.sqlite through `evokernel.evolve.database.Database`
(read-only), takes the run's state, summary and dispatch table from `evokernel.evolve.status`,
and builds one `Node` per database row, in commit order: every row is a node (seeds and their
island copies, evaluated programs, rejected proposals, duplicates, migrants), and nothing else
is. Each node carries its figures and its diff against its first parent.

Tolerated, because real run directories contain them: a seed that failed (the run never
evolved), a run resumed any number of times or killed, a run holding only its seed, results
that are missing or unreadable, non-finite or missing figures (kept as None and counted in
`RunData.warnings`), and parents that are no longer in the database (the child becomes a root
of its island and names the missing parent in `Node.evicted`).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.evaluate.result import EvalResult
from evokernel.evolve.database import Database, NotARunDatabase, Program
from evokernel.evolve.rundir import RunDir
from evokernel.evolve.status import read_status
from evokernel.evolve.summary import summarize
from evokernel.report.outcomes import classify, finite
from evokernel.report.svg import clean

MAX_DIFF_LINES = 400  # per program; a longer diff is cut with a note
MAX_LOG_CHARS = 2000  # tail of a failed program's traceback / stderr kept in the page


@dataclass
class Node:
    """One database row as the page shows it (`to_json` is the page script's contract)."""

    index: int
    id: str
    island: int
    iteration: int
    generation: int
    kind: str
    description: str
    status: str
    outcome: str
    fitness: float | None
    parent_fitness: float | None
    parents: list[int]  # indices of the parents still in the database, first parent first
    evicted: list[str]  # parent ids the database no longer holds
    reasons: list[str]
    insight: str
    regimes: dict[str, Any]
    reused_from: str
    migrant: bool
    code: str
    committed_at: float
    created_at: float
    eval_wall_s: float
    tokens: int
    cost_usd: float
    usage: list[dict[str, Any]]  # one per LLM exchange: model, tokens, cost
    result: EvalResult | None = None
    diff: str | None = None  # unified diff against the first parent; None: nothing to compare
    source: str = ""  # programs/<id>.py relative to the run directory, when that file exists
    nonfinite: bool = False  # some figure of this program is missing or not a finite number

    @property
    def evaluated_here(self) -> bool:
        return self.status in ("ok", "failed") and not self.reused_from

    def scenarios(self) -> list[dict[str, Any]]:
        if self.result is None:
            return []
        out = []
        for s in self.result.scenarios:
            ci = s.speedup_ci or (None, None)
            out.append(
                {
                    "name": s.name,
                    "regime": s.regime,
                    "speedup": s.speedup,
                    "lo": ci[0],
                    "hi": ci[1],
                    "roof": s.pct_roofline,
                    "flags": list(s.flags),
                    "baseline": s.baseline,
                }
            )
        return out

    def phases(self) -> dict[str, float]:
        return phase_times(self.result)

    def metrics(self) -> dict[str, Any]:
        if self.result is None or "metrics" not in self.result.artifacts:
            return {}
        try:
            value = json.loads(self.result.artifacts["metrics"])
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def artifacts(self) -> dict[str, str]:
        """What a generic evaluator reported beside its metrics (OpenEvolve's artifacts)."""
        if self.result is None:
            return {}
        return {
            k.removeprefix("artifact:"): v[-MAX_LOG_CHARS:]
            for k, v in self.result.artifacts.items()
            if k.startswith("artifact:")
        }

    def logs(self) -> str:
        """The tail of what a failed program left behind (traceback, stderr)."""
        if self.result is None or self.status != "failed" or self.reused_from:
            return ""
        art = self.result.artifacts
        text = "\n".join(art[k] for k in ("traceback", "worker_error", "stderr") if art.get(k))
        return text[-MAX_LOG_CHARS:]

    def to_json(self) -> dict[str, Any]:
        return clean(
            {
                "id": self.id,
                "island": self.island,
                "it": self.iteration,
                "gen": self.generation,
                "kind": self.kind,
                "desc": self.description,
                "status": self.status,
                "outcome": self.outcome,
                "fit": self.fitness,
                "pfit": self.parent_fitness,
                "parents": self.parents,
                "evicted": self.evicted,
                "reasons": self.reasons,
                "insight": self.insight,
                "regimes": self.regimes,
                "reused": self.reused_from,
                "scen": self.scenarios(),
                "phases": self.phases(),
                "metrics": self.metrics(),
                "artifacts": self.artifacts(),
                "wall": self.eval_wall_s if self.evaluated_here else None,
                "tokens": self.tokens,
                "cost": self.cost_usd,
                "models": sorted({u["model"] for u in self.usage}),
                "logs": self.logs(),
                "diff": self.diff,
                "src": self.source,
            }
        )  # type: ignore[return-value]


def phase_times(result: EvalResult | None) -> dict[str, float]:
    """The evaluator's seconds per stage (artifact "phases"); unreadable or non-finite
    entries are left out."""
    if result is None or "phases" not in result.artifacts:
        return {}
    try:
        raw = json.loads(result.artifacts["phases"])
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if finite(v)}


@dataclass
class RunData:
    path: Path
    meta: dict[str, Any]  # name, device, fitness_label, config, problem, sessions, ...
    status: dict[str, Any]  # `evokernel status --json`: summary, state, dispatch
    nodes: list[Node]
    seed_code: str
    running: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def best(self) -> Node | None:
        best = self.status.get("best")
        if not best:
            return None
        return next((n for n in self.nodes if n.id == best["id"]), None)

    @property
    def seed(self) -> Node | None:
        return next((n for n in self.nodes if n.kind == "seed" and not n.reused_from), None)

    @property
    def seed_failed(self) -> bool:
        seed = self.seed
        return seed is not None and seed.status == "failed"


META_KEYS = (
    "discarded",
    "name",
    "device",
    "fitness_label",
    "config",
    "problem",
    "sessions",
    "scenarios",
    "iterations_target",
    "islands",
    "created",
    "accounting",
    "workers",
    "lag",
    "features",
    "state",
    "migrations",
)


def unified_diff(before: str, after: str, a: str, b: str) -> str:
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), fromfile=a, tofile=b, lineterm="", n=3
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        cut = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"... {cut} more diff lines not shown"]
    return "\n".join(lines)


def _result(db: Database, p: Program, cache: dict[str, EvalResult | None], bad: list[str]):
    source = p.reused_from or p.id
    if source not in cache:
        try:
            cache[source] = db.result(p.id)
        except (NotARunDatabase, ValueError, KeyError, TypeError) as err:
            cache[source] = None
            bad.append(f"{source}: {type(err).__name__}")
    return cache[source]


def _nonfinite(p: Program, result: EvalResult | None) -> bool:
    if p.status == "ok" and not finite(p.fitness):
        return True
    if p.fitness is not None and not finite(p.fitness):
        return True
    if any(not finite(v) for v in p.regimes.values()):
        return True
    for s in result.scenarios if result is not None else []:
        figures = [s.speedup, s.pct_roofline, *(s.speedup_ci or ())]
        if any(v is not None and not finite(v) for v in figures):
            return True
    return False


def load_run(path: Path) -> RunData:
    run = RunDir.open(Path(path), purpose="to report on")
    trouble = ""
    try:
        _, status = read_status(run.path)
    except (NotARunDatabase, ValueError, KeyError, TypeError) as err:
        # A stored result that does not parse breaks the dispatch table, not the report.
        trouble = f"the dispatch table could not be computed ({type(err).__name__}: {err})"
        status = {}
    db = Database(run.db, readonly=True)
    try:
        if trouble:
            summary = summarize(db, running=run.running())
            status = {**summary.to_dict(), "state": "unknown", "dispatch": []}
        rows = db.programs
        meta = {k: db.meta(k) for k in META_KEYS}
        index = {p.id: i for i, p in enumerate(rows)}
        cache: dict[str, EvalResult | None] = {}
        unreadable: list[str] = []
        nodes: list[Node] = []
        for i, p in enumerate(rows):
            result = _result(db, p, cache, unreadable) if p.status != "rejected" else None
            parents = [index[q] for q in p.parent_ids if q in index and index[q] < i]
            evicted = [q for q in p.parent_ids if q not in index]
            first = (
                rows[index[p.parent_ids[0]]] if p.parent_ids and p.parent_ids[0] in index else None
            )
            nodes.append(
                Node(
                    index=i,
                    id=p.id,
                    island=p.island,
                    iteration=p.iteration,
                    generation=p.generation,
                    kind=p.kind,
                    description=p.description,
                    status=p.status,
                    outcome=classify(
                        p.status,
                        p.reasons,
                        p.fitness,
                        first.fitness if first is not None else None,
                        seed=p.kind == "seed",
                        migrant=p.migrant,
                    ),
                    fitness=p.fitness,
                    parent_fitness=first.fitness if first is not None else None,
                    parents=parents,
                    evicted=evicted,
                    reasons=list(p.reasons),
                    insight=p.insight,
                    regimes=dict(p.regimes),
                    reused_from=p.reused_from,
                    migrant=p.migrant,
                    code=p.code,
                    committed_at=p.committed_at,
                    created_at=p.created_at,
                    eval_wall_s=p.eval_wall_s,
                    tokens=p.tokens,
                    cost_usd=p.cost_usd,
                    usage=[dict(vars(u)) for u in p.usage],
                    result=result,
                    diff=_diff(p, first),
                    source=_source(run, p.id),
                    nonfinite=_nonfinite(p, result),
                )
            )
        data = RunData(
            path=run.path,
            meta=meta,
            status=status,
            nodes=nodes,
            seed_code=str(db.meta("seed_code") or ""),
            running=bool(status.get("running")),
        )
    finally:
        db.close()
    data.warnings = _warnings(data, unreadable) + ([trouble[:300]] if trouble else [])
    return data


def _diff(p: Program, parent: Program | None) -> str | None:
    if not p.code:
        return None
    if parent is None:
        if p.parent_ids:
            return None  # the parent is gone: nothing to compare with
        return unified_diff("", p.code, "/dev/null", p.id)
    if parent.code_hash == p.code_hash:
        return ""
    return unified_diff(parent.code, p.code, parent.id, p.id)


def _source(run: RunDir, program_id: str) -> str:
    path = run.program_file(program_id)
    return str(path.relative_to(run.path)) if path.is_file() else ""


def _warnings(data: RunData, unreadable: list[str]) -> list[str]:
    out = []
    evicted = [n for n in data.nodes if n.evicted]
    if evicted:
        names = sorted({q for n in evicted for q in n.evicted})
        out.append(
            f"{len(evicted)} program(s) name a parent the database no longer holds "
            f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); they are drawn as "
            "roots of their island with a dangling stub"
        )
    odd = sum(1 for n in data.nodes if n.nonfinite)
    if odd:
        out.append(f"{odd} program(s) have missing or non-finite figures, shown as —")
    if unreadable:
        out.append(
            f"{len(unreadable)} stored result(s) could not be read: " + ", ".join(unreadable[:5])
        )
    if data.running:
        out.append("the run was in progress when this report was written")
    return out
