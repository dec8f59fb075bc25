"""Insights: one line per attempt saying what a change did to the measured speedup.

Mutators receive the newest lines (`MutationContext.insights`), so a prompt can learn from
earlier attempts without re-reading whole programs (EvoEngineer's insight-guided setting). A
line names the child and its parent, the change, and either the per-regime speedup before and
after, or why the child failed:

    p0012 offline:knob (BLOCK_N 64 -> 128) vs p0007: short 1.020x -> 1.100x, long 0.950x -> 0.910x
    p0013 llm:diff (unrolled the K loop) vs p0007: failed: mismatch: rel_l2 0.3 > 0.01
    p0014 offline:knob (NUM_WARPS 4 -> 8) vs p0007: screened out: estimate 0.91 < 1.02
"""

from __future__ import annotations

from collections.abc import Iterable

from evokernel.evolve.database import Program


def _short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def insight_line(child: Program, parent: Program | None, kind: str, note: str = "") -> str:
    """`kind`: the problem's fitness kind (speedup | correctness | score); `note`: why the
    evaluator's cascade screened the child out, when it did."""
    change = f"{child.kind} ({_short(child.description, 100)})" if child.description else child.kind
    head = f"{child.id} {change}" + (f" vs {parent.id}" if parent is not None else "")
    if child.status == "rejected":
        return f"{head}: rejected: {_short(child.reasons[0] if child.reasons else '')}"
    if child.status == "failed":
        return f"{head}: failed: {_short(child.reasons[0] if child.reasons else '')}"
    if child.status == "screened":
        return f"{head}: screened out" + (f": {_short(note)}" if note else "")
    if kind == "correctness":
        return f"{head}: correct (CPU interpreter: correctness only, no timing)"
    if kind == "score":
        old = parent.fitness if parent is not None else None
        prev = f"{old:.4g} -> " if old is not None else ""
        return f"{head}: combined_score {prev}{child.fitness:.4g}"
    before = parent.regimes if parent is not None else {}
    parts = []
    for regime, after in child.regimes.items():
        was = before.get(regime)
        parts.append(f"{regime} {was:.3f}x -> {after:.3f}x" if was else f"{regime} {after:.3f}x")
    fit_before = parent.fitness if parent is not None else None
    fit_txt = f"fitness {fit_before:.3f} -> " if fit_before is not None else "fitness "
    parts.append(f"{fit_txt}{child.fitness:.3f}" if child.fitness is not None else "no fitness")
    return f"{head}: " + ", ".join(parts)


def recent_insights(rows: Iterable[Program], n: int) -> list[str]:
    """The newest `n` insight lines of iteration rows, oldest first."""
    lines = [p for p in rows if p.iteration >= 0 and not p.migrant and p.insight]
    lines.sort(key=lambda p: p.iteration)
    return [p.insight for p in lines[-n:]] if n > 0 else []


def last_failure(rows: Iterable[Program], parent_id: str) -> str:
    """Why the newest failed or rejected child of `parent_id` failed ("" if none did)."""
    failed = [
        p
        for p in rows
        if p.parent_ids[:1] == (parent_id,) and p.status in ("failed", "rejected") and p.reasons
    ]
    if not failed:
        return ""
    newest = max(failed, key=lambda p: p.iteration)
    return newest.reasons[0]
