"""What a grid-wide dependency between decode stages costs on this GPU, three ways.

    python -m evokernel.bench.sync_costs [--stages 140] [--reps 30] [--out F.json]

A batch-1 decode step is a chain of stages that each need the whole vector the previous one
wrote (28 layers x 5 kernels for Qwen3-0.6B). Before fusing stages or building a persistent
kernel, measure the price of each way to pass that dependency (kernels/sync_probes.py), with
minimal work per stage (a 4 KB vector read, reduced, a slice written):

  * launches: one kernel per stage in a CUDA graph, plain and with programmatic dependent
    launch; us per stage = graph time / stages;
  * barrier: the same stages in one persistent launch (one program per SM) separated by a
    grid barrier on an atomic counter; us per stage;
  * atomics: P programs each adding a 1,024-float vector into one accumulator (what a fused
    gate_up+down or split-K kernel would do) against the same P programs storing their rows
    plainly; us per launch, one launch at a time in a graph of 28.

Every variant's result is checked before it is timed. CUDA only (the barrier would never end
under the interpreter). Medians over --reps graph replays after warm-up, CUDA events; prints a
table and writes JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from evokernel.bench.decode_stages import graph_us
from evokernel.ops.grid import cdiv, next_pow2

N = 1024  # floats per stage vector (a Qwen3-0.6B hidden row is 1,024 values)


def _check(got: torch.Tensor, want: float, what: str) -> None:
    bad = int((got != want).sum())
    if bad:
        raise RuntimeError(f"{what}: {bad} of {got.numel()} values wrong (want {want})")


def launches(stages: int, programs: int, pdl: bool, reps: int) -> float:
    """us per stage, one launch per stage."""
    from evokernel.kernels.sync_probes import chain_kernel

    block = next_pow2(cdiv(N, programs))
    a = torch.zeros(N, device="cuda")
    b = torch.zeros(N, device="cuda")

    def body() -> None:
        for s in range(stages):
            src, dst = (a, b) if s % 2 == 0 else (b, a)
            chain_kernel[(cdiv(N, block),)](
                src, dst, N, BLOCK=block, BLOCK_N=N, PDL=pdl, num_warps=4, launch_pdl=pdl
            )

    def reset() -> None:
        a.zero_()
        b.zero_()

    us = graph_us(body, reps, reset)
    _check(b if stages % 2 else a, float(stages), f"launch chain (pdl={pdl})")
    return us / stages


def barrier(stages: int, programs: int, reps: int) -> float:
    """us per stage, one persistent launch with a grid barrier between stages."""
    from evokernel.kernels.sync_probes import barrier_kernel

    block = next_pow2(cdiv(N, programs))
    grid = cdiv(N, block)
    a = torch.zeros(N, device="cuda")
    b = torch.zeros(N, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")

    def body() -> None:
        barrier_kernel[(grid,)](a, b, counter, N, stages, BLOCK=block, BLOCK_N=N, num_warps=4)

    def reset() -> None:
        a.zero_()
        b.zero_()
        counter.zero_()

    us = graph_us(body, reps, reset)
    _check(b if stages % 2 else a, float(stages), "barrier stages")
    _check(counter, float(stages * grid), "barrier counter")
    return us / stages


def atomics(programs: int, reps: int, launches_per_graph: int = 28) -> dict[str, float]:
    """us per launch: P programs adding N floats into one accumulator, and storing rows."""
    from evokernel.kernels.sync_probes import atomic_add_kernel, store_rows_kernel

    acc = torch.zeros(N, device="cuda")
    rows = torch.zeros(programs, N, device="cuda")

    def add() -> None:
        for _ in range(launches_per_graph):
            atomic_add_kernel[(programs,)](acc, N, BLOCK_N=N, num_warps=4)

    def store() -> None:
        for _ in range(launches_per_graph):
            store_rows_kernel[(programs,)](rows, N, BLOCK_N=N, num_warps=4)

    add_us = graph_us(add, reps, acc.zero_) / launches_per_graph
    _check(acc, float(programs * launches_per_graph), f"atomic sum over {programs} programs")
    store_us = graph_us(store, reps, rows.zero_) / launches_per_graph
    _check(rows, 1.0, "row stores")
    return {"atomic_add_us": add_us, "store_rows_us": store_us}


def run(stages: int, reps: int, with_barrier: bool) -> dict[str, Any]:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    doc: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "sms": sms,
        "torch": torch.__version__,
        "stages": stages,
        "vector_floats": N,
        "per_stage_us": {},
        "atomics": {},
    }
    pdl_ok = torch.cuda.get_device_capability()[0] >= 9
    for programs in (128, 256):
        doc["per_stage_us"][f"launch P={programs}"] = launches(stages, programs, False, reps)
        if pdl_ok:
            doc["per_stage_us"][f"launch+pdl P={programs}"] = launches(stages, programs, True, reps)
    if with_barrier:
        programs = min(sms, 128)
        doc["per_stage_us"][f"barrier P={programs}"] = barrier(stages, programs, reps)
    for programs in (96, 192, 384):
        doc["atomics"][str(programs)] = atomics(programs, reps)
    return doc


def table(doc: dict[str, Any]) -> list[str]:
    lines = [f"sync costs on {doc['gpu']} ({doc['sms']} SMs), {doc['stages']} stages"]
    for name, us in doc["per_stage_us"].items():
        lines.append(f"  {name:<22} {us:6.2f} us per stage")
    for programs, r in doc["atomics"].items():
        lines.append(
            f"  {programs:>4} programs x {doc['vector_floats']} floats: atomic add "
            f"{r['atomic_add_us']:6.2f} us, plain row stores {r['store_rows_us']:6.2f} us"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stages", type=int, default=140, help="stages per chain (28 x 5)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--no-barrier", action="store_true", help="skip the persistent kernel")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.stages < 1 or args.reps < 1:
        parser.error("--stages and --reps must be at least 1")
    if not torch.cuda.is_available():
        print("error: sync_costs needs a CUDA GPU", file=sys.stderr)
        return 2
    doc = run(args.stages, args.reps, not args.no_barrier)
    for line in table(doc):
        print(line)
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
