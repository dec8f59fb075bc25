"""The run's outputs: per-scenario dispatch table, best program, summary.

Dispatch rule, per public scenario: among every correct program the run evaluated in full
(a program the cascade screened out was timed on a few scenarios only, and is left out), the one
whose speedup interval for that scenario lies wholly above 1 (lower bound > 1, no flag), with
the highest lower bound (ties: the earlier program); if none does, the baseline. The table can
therefore never be slower than the baseline on any scenario, as far as the 95% intervals tell.
On the CPU interpreter nothing is timed, so every scenario keeps the baseline.

Writes RUN_DIR/dispatch.json, RUN_DIR/best.py (the best program by fitness) and
RUN_DIR/summary.json (the status summary plus the table); `format_table` prints it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from evokernel.evolve.database import Database
from evokernel.evolve.islands import rank_key
from evokernel.evolve.rundir import RunDir, atomic_write
from evokernel.evolve.summary import RunSummary, format_tally, summarize

BASELINE = "baseline"


@dataclass
class DispatchEntry:
    scenario: str
    regime: str
    program: str  # a program id, or "baseline"
    file: str  # path of the program's source relative to the run dir ("" for the baseline)
    baseline: str  # the stock implementation it was timed against
    speedup: float | None  # median of paired ratios (None for the baseline)
    speedup_ci: tuple[float, float] | None


def dispatch_table(db: Database) -> list[DispatchEntry]:
    """One entry per public scenario of the run (meta "scenarios": [name, regime] pairs)."""
    best: dict[str, tuple[float, int, DispatchEntry]] = {}
    baselines: dict[str, str] = {}
    full = (p for p in db.programs if p.evaluated_here and p.status == "ok")  # not screened
    for p in sorted(full, key=rank_key):
        result = db.result(p.id)
        if result is None:
            continue
        for s in result.scenarios:
            baselines.setdefault(s.name, s.baseline)
            if not s.win or s.speedup_ci is None:
                continue
            lower = float(s.speedup_ci[0])
            entry = DispatchEntry(
                scenario=s.name,
                regime=s.regime,
                program=p.id,
                file=f"programs/{p.id}.py",
                baseline=s.baseline,
                speedup=s.speedup,
                speedup_ci=(float(s.speedup_ci[0]), float(s.speedup_ci[1])),
            )
            have = best.get(s.name)
            if have is None or (-lower, p.iteration) < (-have[0], have[1]):
                best[s.name] = (lower, p.iteration, entry)
    table = []
    for name, regime in db.meta("scenarios", []):
        if name in best:
            table.append(best[name][2])
        else:
            table.append(
                DispatchEntry(name, regime, BASELINE, "", baselines.get(name, ""), None, None)
            )
    return table


def write_outputs(db: Database, run: RunDir) -> tuple[RunSummary, list[DispatchEntry]]:
    """Write dispatch.json, best.py and summary.json; return what they hold."""
    summary = summarize(db)
    table = dispatch_table(db)
    entries = [asdict(e) for e in table]
    doc = {
        "task": summary.task,
        "device": summary.device,
        "rule": "per scenario: the correct program with the highest speedup lower bound > 1 "
        "(unflagged), else the baseline",
        "scenarios": entries,
    }
    atomic_write(run.path / "dispatch.json", json.dumps(doc, indent=2) + "\n")
    if summary.best is not None:
        atomic_write(run.path / "best.py", db.get(summary.best["id"]).code)
    out = {**summary.to_dict(), "dispatch": entries}
    atomic_write(run.path / "summary.json", json.dumps(out, indent=2) + "\n")
    return summary, table


def _ci(e: DispatchEntry) -> str:
    if e.speedup is None or e.speedup_ci is None:
        return "-"
    return f"{e.speedup:.3f}x [{e.speedup_ci[0]:.3f}, {e.speedup_ci[1]:.3f}]"


def format_table(summary: RunSummary, table: list[DispatchEntry]) -> str:
    """The end-of-run summary as plain text."""
    best = summary.best
    best_txt = "none" if best is None else f"{best['id']} fitness {best['fitness']:.4f}"
    screened = f"; {summary.screened} screened out" if summary.screened else ""
    lines = [
        f"task {summary.task} on {summary.device}: {summary.iterations_done}/"
        f"{summary.iterations_target} iterations, {summary.evaluated} evaluated "
        f"({summary.valid} valid, {summary.failed} failed{screened}), {summary.reused} reused, "
        f"{summary.rejected} rejected, {summary.duplicates} duplicates",
        f"best: {best_txt}  [{summary.fitness_label}]",
    ]
    if summary.requeued:
        lines.append(
            f"re-queued after worker or node faults: {summary.requeued} evaluation attempt(s)"
        )
    if summary.tokens:
        lines.append(f"tokens: {summary.tokens}  cost: ${summary.cost_usd:.4f}")
    lines.extend(format_tally(summary.by_mutator))
    if table:
        rows = [("scenario", "regime", "chosen", "speedup [95% CI]")]
        rows += [(e.scenario, e.regime, e.program, _ci(e)) for e in table]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for j, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            if j == 0:
                lines.append("  ".join("-" * w for w in widths))
        if summary.device == "cpu":
            lines.append("(CPU interpreter: nothing is timed; every scenario keeps the baseline)")
    return "\n".join(lines)
