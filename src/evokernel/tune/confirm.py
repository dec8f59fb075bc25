"""End-to-end confirmation of a pack: a program that won its task scenario stays in a bucket
only if the whole decode step is faster with it there.

    pack = confirm_pack(pack, model_dir, device, stream)

Why: a task scenario times one layer (a CUDA graph of four), not the step; on an H100 a layer
program 1.033x [1.014, 1.042] at ctx 512 ran the 28-layer step at 0.9999x there (and 0.9865x
where the rule had carried it into an unmeasured bucket). So for every bucket that runs a
program, the engine without and with the pack are loaded together and timed interleaved
(bench/paired.py, `CONFIRM_ROUNDS` rounds of `CONFIRM_STEPS` steps) at the bucket's lowest
and highest position (the position after the previous bound, and the last from which
`CONFIRM_STEPS` steps stay inside the bucket), each next to a control pair (the engine against
a second loaded copy of itself: what identical code differs by in this run, up to 0.3% on
an H100). The program stays when, at both positions, its interval's lower bound is above 1
and above the control's upper bound; otherwise the bucket goes back to the baseline. Each
entry records what was measured (`PackEntry.end_to_end`, with the program tried and the
control's interval), and pack.json is rewritten (files of demoted programs removed). On the
CPU nothing is timed: `tune` does not call this there.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, TextIO

import torch

from evokernel.engine.packs.format import BASELINE, Pack, PackEntry, TaskTable
from evokernel.model.config import ModelConfig

CONFIRM_STEPS = 32
CONFIRM_WARMUP = 4
CONFIRM_ROUNDS = 8


def bucket_positions(entries: tuple[PackEntry, ...], i: int, max_positions: int) -> list[int]:
    """Prompt lengths at the low and high end of bucket i (its decode steps stay inside)."""
    low = (entries[i - 1].max_len if i else 0) + 1
    top = min(entries[i].max_len, max_positions) - CONFIRM_STEPS - 1
    return sorted({low, max(low, top)})


def confirm_pack(pack: Pack, model_dir: Path, device: str, stream: TextIO | None = None) -> Pack:
    """The pack with every program confirmed end to end or demoted to the baseline; rewritten
    in place when anything changed."""
    from evokernel.bench.paired import control_copy, measure_pair, pair_line
    from evokernel.bench.stepping import CellPlan, prompt_ids
    from evokernel.bench.systems import load_system
    from evokernel.tune.write import save_pack

    out = stream or sys.stdout
    cfg = ModelConfig.from_dir(model_dir)
    todo = [
        (name, i)
        for name, table in pack.tasks.items()
        for i, entry in enumerate(table.entries)
        if not entry.is_baseline
    ]
    if not todo:
        return pack
    limit = cfg.max_position_embeddings
    plans = {
        (name, i): [
            CellPlan(p, CONFIRM_STEPS, CONFIRM_WARMUP, 0.0)
            for p in bucket_positions(pack.tasks[name].entries, i, limit)
        ]
        for name, i in todo
    }
    max_need = max(plan.need for group in plans.values() for plan in group)
    dtype = getattr(torch, str(pack.model.get("dtype")))
    systems: list[Any] = []
    try:
        for kernels in (None, pack.path, None):
            name = "evokernel" if kernels is None else "evokernel_pack"
            systems.append(load_system(name, model_dir, device, dtype, max_need, None, kernels))
        plain, packed, control = systems[0], systems[1], control_copy(systems[2])
    except BaseException:
        for system in systems:
            system.close()
        raise
    tables: dict[str, list[PackEntry]] = {n: list(t.entries) for n, t in pack.tasks.items()}
    try:
        for name, i in todo:
            entry = tables[name][i]
            checks: list[dict[str, Any]] = []
            for plan in plans[(name, i)]:
                prompt = prompt_ids(cfg.vocab_size, plan.position)
                same = measure_pair(plain, control, prompt, plan, device, rounds=CONFIRM_ROUNDS)
                got = measure_pair(plain, packed, prompt, plan, device, rounds=CONFIRM_ROUNDS)
                for result in (same, got):
                    line = pair_line(result)
                    print(f"confirm {entry.program}, bucket <= {entry.max_len}: {line}", file=out)
                checks.append(
                    {
                        "position": plan.position,
                        "speedup": got["speedup"],
                        "ci": got["ci"],
                        "control_ci": same["ci"],
                        "program": entry.program_id,
                        "error": got["error"] or same["error"],
                    }
                )
            kept = all(
                c["error"] is None and c["ci"][0] > control_floor(c["control_ci"]) for c in checks
            )
            keys = ("position", "speedup", "ci", "control_ci", "program")
            record = tuple({k: c[k] for k in keys} for c in checks)
            if kept:
                tables[name][i] = dataclasses.replace(entry, end_to_end=record)
            else:
                print(f"  bucket <= {entry.max_len}: back to the baseline (not faster end to end)",
                      file=out)  # fmt: skip
                tables[name][i] = PackEntry(
                    entry.max_len, entry.scenario, entry.context, BASELINE, end_to_end=record
                )
    finally:
        for system in systems:
            system.close()
    new = dataclasses.replace(
        pack,
        tasks={
            n: TaskTable(t.task, t.op, tuple(tables[n]), run=t.run, rule=t.rule)
            for n, t in pack.tasks.items()
        },
    )
    files = {p.relative_to(pack.path).as_posix(): p.read_text() for p in new.programs()}
    return save_pack(new, files)


def control_floor(control_ci: list[float] | None) -> float:
    """What a pack's lower bound must exceed: 1, and the control's upper bound (how much
    faster a second copy of identical code measured in the same run)."""
    return max(1.0, control_ci[1]) if control_ci else 1.0


__all__ = ["CONFIRM_ROUNDS", "CONFIRM_STEPS", "bucket_positions", "confirm_pack", "control_floor"]
