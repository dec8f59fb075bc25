"""Figures of a whole run, computed from `RunData`: progress curves, sessions, per-scenario
speedups, failure counts, mutators, LLM usage, evaluator phase times, environment.

Time on the progress curve is *active* time: the run's sessions laid end to end, so the hours
a stopped run waited before `--resume` do not show as a stall. Sessions are the ones the run
recorded (`meta["sessions"]`, written when a session ends), plus one inferred session for each
stretch of commits outside them (a session that was killed, or the one still running), which
starts at the earliest launch or commit time of its rows.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from evokernel.reasons import REASON_CODES, reason_code
from evokernel.report.outcomes import finite
from evokernel.report.run_data import RunData


@dataclass
class Session:
    start: float
    end: float
    recorded: bool
    stop_reason: str = ""


@dataclass
class Progress:
    evals: list[tuple[float, float]]  # (evaluations so far, best fitness so far)
    scatter: list[tuple[float, float]]  # (evaluation number, its fitness)
    active: list[tuple[float, float]]  # (active seconds, best fitness so far)
    resumes_at_eval: list[float]  # evaluation count at which each later session began
    resumes_at_time: list[float]  # active seconds at which each later session began
    sessions: list[Session]


def sessions(data: RunData) -> list[Session]:
    recorded = []
    for s in data.meta.get("sessions") or []:
        start, end = s.get("started"), s.get("ended")
        if finite(start) and finite(end):
            recorded.append(Session(float(start), float(end), True, str(s.get("stop_reason", ""))))
    recorded.sort(key=lambda s: s.start)
    inferred: dict[int, Session] = {}  # keyed by how many recorded sessions precede it
    for n in sorted(data.nodes, key=lambda n: n.committed_at):
        t = n.committed_at
        if not finite(t) or any(s.start <= t <= s.end for s in recorded):
            continue
        slot = sum(1 for s in recorded if s.end < t)
        begin = min(x for x in (n.created_at, t) if finite(x) and x > 0)
        if slot > 0:
            begin = max(begin, recorded[slot - 1].end)
        s = inferred.get(slot)
        if s is None:
            inferred[slot] = Session(begin, t, False)
        else:
            s.start, s.end = min(s.start, begin), max(s.end, t)
    return sorted([*recorded, *inferred.values()], key=lambda s: s.start)


def _active_time(t: float, spans: list[Session]) -> float:
    done = 0.0
    for s in spans:
        if t < s.start:
            return done
        if t <= s.end:
            return done + (t - s.start)
        done += s.end - s.start
    return done


def progress(data: RunData) -> Progress:
    spans = sessions(data)
    evals: list[tuple[float, float]] = []
    scatter: list[tuple[float, float]] = []
    active: list[tuple[float, float]] = []
    resumes_eval: list[float] = []
    best: float | None = None
    count = 0
    starts = [s.start for s in spans[1:]]
    for n in data.nodes:  # commit order
        if not n.evaluated_here:
            continue
        count += 1
        while starts and n.committed_at >= starts[0]:
            resumes_eval.append(count - 0.5)
            starts.pop(0)
        if n.status == "ok" and finite(n.fitness):
            scatter.append((count, float(n.fitness)))  # type: ignore[arg-type]
            if best is None or n.fitness > best:  # type: ignore[operator]
                best = float(n.fitness)  # type: ignore[arg-type]
        if best is not None:
            evals.append((count, best))
            active.append((_active_time(n.committed_at, spans), best))
    resumes_time = [_active_time(s.start, spans) for s in spans[1:]]
    return Progress(evals, scatter, active, resumes_eval, resumes_time, spans)


@dataclass
class ScenarioRow:
    name: str
    regime: str
    best: dict[str, Any] | None  # the best program's figures (Node.scenarios() entry)
    dispatch: dict[str, Any]  # the dispatch table's entry (program, speedup, speedup_ci)


def scenario_rows(data: RunData) -> list[ScenarioRow]:
    best = data.best
    figures = {s["name"]: s for s in best.scenarios()} if best is not None else {}
    table = {e["scenario"]: e for e in data.status.get("dispatch", [])}
    names = [(str(n), str(r)) for n, r in data.meta.get("scenarios") or []]
    known = {n for n, _ in names}
    names += [(s["name"], s["regime"]) for s in figures.values() if s["name"] not in known]
    return [ScenarioRow(n, r, figures.get(n), table.get(n, {})) for n, r in names]


@dataclass
class FailureCount:
    code: str
    count: int
    meaning: str
    example: str


def failures(data: RunData) -> list[FailureCount]:
    """Reason codes of the programs evaluated here and failed (each code once per program),
    and the proposals rejected before evaluation."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for n in data.nodes:
        if n.status == "rejected":
            codes = {"rejected": n.reasons[0] if n.reasons else ""}
        elif n.status == "failed" and not n.reused_from:
            codes = {}
            for r in n.reasons or ["unknown: no reason recorded"]:
                codes.setdefault(reason_code(r), r)
        else:
            continue
        for code, line in codes.items():
            counts[code] += 1
            examples.setdefault(code, line[:240])
    meaning = dict(REASON_CODES)
    meaning["rejected"] = "the proposal produced no program or broke the EVOLVE-BLOCK rule"
    return [
        FailureCount(code, c, meaning.get(code, ""), examples[code])
        for code, c in counts.most_common()
    ]


@dataclass
class MutatorRow:
    kind: str
    proposals: int = 0
    no_child: int = 0  # the mutator could not make a program
    invalid: int = 0  # children that did not parse or compile, or broke the block rule
    duplicates: int = 0  # children repeating a program already tried (skipped or reused)
    evaluated: int = 0
    correct: int = 0
    improved: int = 0
    failed: int = 0


def mutators(data: RunData) -> list[MutatorRow]:
    """What each kind of proposal did; children the offline mutator threw away before any
    evaluation (the run's `discarded` tally) count as invalid or duplicates."""
    rows: dict[str, MutatorRow] = {}
    for n in data.nodes:
        if n.iteration < 0 or n.migrant:
            continue
        r = rows.setdefault(n.kind, MutatorRow(n.kind))
        r.proposals += 1
        if n.status == "rejected":
            r.no_child += not n.code
            r.invalid += bool(n.code)
        elif n.status == "duplicate" or n.reused_from:
            r.duplicates += 1
        r.evaluated += n.evaluated_here
        r.invalid += n.evaluated_here and any(x.startswith("static:") for x in n.reasons)
        r.correct += n.status == "ok" and n.evaluated_here
        r.improved += n.outcome == "improved"
        r.failed += n.status == "failed" and n.evaluated_here
    for kind, counts in (data.meta.get("discarded") or {}).items():
        r = rows.setdefault(kind, MutatorRow(kind))
        r.invalid += int(counts.get("invalid", 0))
        r.duplicates += int(counts.get("duplicate", 0))
    return sorted(rows.values(), key=lambda r: -r.proposals)


def llm_usage(data: RunData) -> list[dict[str, Any]]:
    """Per model: requests, tokens, cost. From the run's LLM accounting when it counted
    requests (it includes failed ones), else from the usage stored with each proposal."""
    models = (data.meta.get("accounting") or {}).get("models") or {}
    rows = [
        {"model": name, **{k: t.get(k) for k in TALLY_KEYS}}
        for name, t in sorted(models.items())
        if isinstance(t, dict)
    ]
    if any((r.get("requests") or 0) > 0 for r in rows):
        return rows
    by_model: dict[str, dict[str, Any]] = {}
    for n in data.nodes:
        for u in n.usage:
            m = by_model.setdefault(u["model"], {"model": u["model"], "requests": 0})
            m["requests"] += 1
            for k in ("prompt_tokens", "completion_tokens", "cost_usd"):
                m[k] = (m.get(k) or 0) + (u.get(k) or 0)
    return sorted(by_model.values(), key=lambda r: r["model"])


TALLY_KEYS = (
    "requests",
    "attempts",
    "failures",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "wall_s",
    "estimated",
)


@dataclass
class PhaseRow:
    phase: str
    count: int
    median: float
    p90: float
    max: float
    total: float


PHASE_ORDER = ("startup", "static", "load", "correctness", "timing", "timing_wait", "timing_held")


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def phase_rows(data: RunData) -> list[PhaseRow]:
    """Seconds per evaluator stage over the programs evaluated here, plus their whole
    evaluation wall time ("evaluation")."""
    values: dict[str, list[float]] = {}
    for n in data.nodes:
        if not n.evaluated_here:
            continue
        for name, secs in n.phases().items():
            values.setdefault(name, []).append(secs)
        if finite(n.eval_wall_s) and n.eval_wall_s > 0:
            values.setdefault("evaluation", []).append(n.eval_wall_s)
    order = {name: i for i, name in enumerate((*PHASE_ORDER, "evaluation"))}
    return [
        PhaseRow(
            name,
            len(v),
            statistics.median(v),
            _quantile(v, 0.9),
            max(v),
            sum(v),
        )
        for name, v in sorted(values.items(), key=lambda kv: (order.get(kv[0], 50), kv[0]))
    ]


def devices(data: RunData) -> list[tuple[dict[str, Any], int]]:
    """The distinct devices the evaluations reported, with how many evaluations saw each."""
    seen: Counter[tuple[tuple[str, Any], ...]] = Counter()
    for n in data.nodes:
        if n.evaluated_here and n.result is not None and n.result.device is not None:
            seen[tuple(sorted(vars(n.result.device).items()))] += 1
    return [(dict(k), c) for k, c in seen.most_common()]


def timing_labels(data: RunData) -> list[tuple[str, int]]:
    labels: Counter[str] = Counter(
        n.result.timing_label for n in data.nodes if n.evaluated_here and n.result is not None
    )
    return labels.most_common()
