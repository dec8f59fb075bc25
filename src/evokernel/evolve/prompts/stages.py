"""The per-stage breakdown an LLM mutator sees: the profiler's kernel list, summed per kernel.

The evaluator keeps, per public scenario, the GPU events of one profiled candidate call as the
artifact `kernels` (JSON: scenario -> [{name, stream, us}], evaluate/figures.py). For a
multi-kernel candidate (a whole decode layer) each kernel is a stage, so the prompt shows,
per scenario, each kernel's device time and share of the call, largest first:

    b1_ctx2048 (25.8 us in 6 kernels)
      norm_gemv_kernel          7.10 us  28%
      ...

`stage_breakdown(text)` returns that text, or None when `text` is not such a list (the
builder then shows the artifact as it is).
"""

from __future__ import annotations

import json
from typing import Any

MAX_STAGES = 12  # per scenario; the rest summed on one line


def _base(name: str) -> str:
    return name.split("(")[0].strip() or name


def stage_breakdown(text: str) -> str | None:
    try:
        doc: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    blocks = []
    for scenario, events in doc.items():
        if not isinstance(events, list):
            return None
        per: dict[str, float] = {}
        for event in events:
            if not isinstance(event, dict) or not isinstance(event.get("us"), int | float):
                return None
            name = _base(str(event.get("name", "?")))
            per[name] = per.get(name, 0.0) + float(event["us"])
        total = sum(per.values())
        lines = [f"{scenario} ({total:.1f} us in {len(events)} GPU events)"]
        ranked = sorted(per.items(), key=lambda kv: -kv[1])
        width = max((len(n) for n, _ in ranked[:MAX_STAGES]), default=0)
        for name, us in ranked[:MAX_STAGES]:
            share = 100 * us / total if total > 0 else 0.0
            lines.append(f"  {name:<{width}}  {us:8.2f} us  {share:3.0f}%")
        rest = ranked[MAX_STAGES:]
        if rest:
            lines.append(f"  ({len(rest)} more kernels: {sum(us for _, us in rest):.2f} us)")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else None
