"""Where one evaluation's time goes (diagnostic): `python3 scripts/gpu/eval_phases.py`.

For each task seed, one evaluation at a time: a new source (cold compiles), the same source
again (the compile cache's hit), then with one switch off each (profiler, hidden scenarios,
timing). Then `--parallel` distinct sources `--workers` at a time. One line per evaluation:
wall seconds and the `phases` artifact; the load average at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

from evokernel.evaluate import EvalOptions, evaluate, evaluate_many
from evokernel.tasks import get_task


def line(label: str, result, wall: float) -> str:  # type: ignore[no-untyped-def]
    phases = json.loads(result.artifacts.get("phases", "{}"))
    ok = "ok" if result.correct else f"REJECTED {result.reason_codes}"
    return f"{label:<34} {wall:6.1f} s {ok:<8} {phases}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default="decode_linear,gqa_decode_attention")
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    base = EvalOptions(seed=5)
    for name in args.tasks.split(","):
        task = get_task(name)
        seed = task.seed_candidate.read_text()
        fresh = f"{seed}\n# variant {time.time_ns()}\n"
        runs = [
            ("new source", fresh, base),
            ("same source (cached compiles)", fresh, base),
            ("same, profile off", fresh, replace(base, profile=False)),
            ("same, hidden off", fresh, replace(base, hidden=False)),
            ("same, time off", fresh, replace(base, time=False)),
            ("same, reps 10", fresh, replace(base, reps=10)),
        ]
        for label, source, options in runs:
            t0 = time.perf_counter()
            result = evaluate(task.name, source, "cuda", options)
            print(f"{name[:12]} {line(label, result, time.perf_counter() - t0)}", flush=True)
        if args.parallel:
            sources = [f"{seed}\n# parallel {i} {time.time_ns()}\n" for i in range(args.parallel)]
            t0 = time.perf_counter()
            results = evaluate_many(task.name, sources, "cuda", base, workers=args.workers)
            wall = time.perf_counter() - t0
            for i, result in enumerate(results):
                print(f"{name[:12]} {line(f'parallel #{i}', result, result.wall_s)}")
            print(
                f"{name}: {args.parallel} in {wall:.1f} s with {args.workers} in flight = "
                f"{60 * args.parallel / wall:.1f} evals/min; load {os.getloadavg()}",
                flush=True,
            )


if __name__ == "__main__":
    main()
