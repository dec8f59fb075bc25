"""`status`: a run's state as text and as a JSON-ready dict, from its database (read-only).

The dispatch table is recomputed from the stored results, so it is current even while the run
is going or after it was killed.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from evokernel.evolve.database import Database
from evokernel.evolve.dispatch import dispatch_table, format_table
from evokernel.evolve.rundir import RunDir


def read_status(path: Path) -> tuple[str, dict[str, Any]]:
    from evokernel.evolve.summary import summarize

    run = RunDir.open(path, purpose="to report on")
    db = Database(run.db, readonly=True)
    try:
        running = run.running()
        summary = summarize(db, running=running)
        table = dispatch_table(db)
    finally:
        db.close()
    resume = f"continue with evokernel evolve --resume --out {run.path}"
    if running:
        state = "running"
    elif summary.finished:
        state = f"finished ({summary.stop_reason})"
    elif summary.stop_reason == "error":
        state = f"stopped (error: {summary.error}); {resume}"
    elif summary.stop_reason == "no-child":
        state = f"stopped: {summary.error or 'no child program could be proposed'}; {resume}"
    elif summary.stop_reason:
        state = f"stopped ({summary.stop_reason}); {resume}"
    else:
        state = f"stopped (killed?); {resume}"
    lines = [
        f"{run.path}: {state}",
        format_table(summary, table),
        "islands (members / occupied cells): "
        + ", ".join(f"{n}/{c}" for n, c in zip(summary.islands, summary.cells)),
    ]
    for model, use in summary.by_model.items():
        lines.append(
            f"  {model}: {use['prompt_tokens']:.0f} prompt + {use['completion_tokens']:.0f} "
            f"completion tokens, ${use.get('cost_usd', 0.0):.4f}"
        )
    data = {**summary.to_dict(), "state": state, "dispatch": [asdict(e) for e in table]}
    return "\n".join(lines), data
