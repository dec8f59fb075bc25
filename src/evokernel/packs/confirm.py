"""End-to-end confirmation of a pack: a program that won its task scenario stays in a bucket
only if the whole decode step is faster with it there.

    pack = confirm_pack(pack, model_dir, device, stream)

Why: a task scenario times one layer (a CUDA graph of four), not the step; on an H100 a layer
program 1.033x [1.014, 1.042] at ctx 512 ran the 28-layer step at 0.9999x there (and 0.9865x
where the rule had carried it into an unmeasured bucket). So for every bucket that runs a
program, the engine without and with the pack are loaded together and timed interleaved
(bench/paired.py, `CONFIRM_ROUNDS` rounds of `CONFIRM_STEPS` steps) at the bucket's lowest
and highest position (the position after the previous bound, and the last from which
`CONFIRM_STEPS` steps stay inside the bucket). The program stays when every interval lies
wholly above 1; otherwise the bucket goes back to the baseline. Each entry records what was
measured (`PackEntry.end_to_end`, with the program tried), and pack.json is rewritten (files
of demoted programs removed). On the CPU nothing is timed: `tune` does not call this there.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, TextIO

import torch

from evokernel.model.config import Qwen3Config
from evokernel.packs.format import BASELINE, Pack, PackEntry, TaskTable

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
    from evokernel.bench.decode import prompt_ids
    from evokernel.bench.paired import measure_pair, pair_line
    from evokernel.bench.stepping import CellPlan
    from evokernel.bench.systems import load_system
    from evokernel.packs.write import save_pack

    out = stream or sys.stdout
    cfg = Qwen3Config.from_dir(model_dir)
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
    plain = load_system("evokernel", model_dir, device, dtype, max_need, None, None)
    try:
        packed = load_system("evokernel_pack", model_dir, device, dtype, max_need, None, pack.path)
    except BaseException:
        plain.close()
        raise
    tables: dict[str, list[PackEntry]] = {n: list(t.entries) for n, t in pack.tasks.items()}
    try:
        for name, i in todo:
            entry = tables[name][i]
            checks: list[dict[str, Any]] = []
            for plan in plans[(name, i)]:
                prompt = prompt_ids(cfg.vocab_size, plan.position)
                got = measure_pair(plain, packed, prompt, plan, device, rounds=CONFIRM_ROUNDS)
                print(f"confirm {entry.program}, bucket <= {entry.max_len}: {pair_line(got)}",
                      file=out)  # fmt: skip
                checks.append(
                    {
                        "position": plan.position,
                        "speedup": got["speedup"],
                        "ci": got["ci"],
                        "program": entry.program_id,
                        "error": got["error"],
                    }
                )
            kept = all(c["error"] is None and c["ci"][0] > 1.0 for c in checks)
            record = tuple(
                {k: c[k] for k in ("position", "speedup", "ci", "program")} for c in checks
            )
            if kept:
                tables[name][i] = dataclasses.replace(entry, end_to_end=record)
            else:
                print(f"  bucket <= {entry.max_len}: back to the baseline (not faster end to end)",
                      file=out)  # fmt: skip
                tables[name][i] = PackEntry(
                    entry.max_len, entry.scenario, entry.context, BASELINE, end_to_end=record
                )
    finally:
        packed.close()
        plain.close()
    new = dataclasses.replace(
        pack,
        tasks={
            n: TaskTable(t.task, t.op, tuple(tables[n]), run=t.run, rule=t.rule)
            for n, t in pack.tasks.items()
        },
    )
    files = {p.relative_to(pack.path).as_posix(): p.read_text() for p in new.programs()}
    save_pack(new, files)
    return new


__all__ = ["CONFIRM_ROUNDS", "CONFIRM_STEPS", "bucket_positions", "confirm_pack"]
