"""The offline mutator on a kernel task whose seed lost its `# tune:` annotations.

    PYTHONPATH=src python -m evokernel.bench.untuned_bench --out DIR
        [--task decode_linear] [--minutes 4] [--iterations 80] [--device cuda]

The task's seed with every `# tune: ...` comment removed has no declared knob, so the offline
mutator can only use what the parser finds: its constants (block sizes, warps, stages, split
factors: powers of two double or halve), launch parameters, operators, statements and loops
(`evolve/mutators/edits.py`), plus the known Triton transformations. The search runs the real
controller and evaluator (`evokernel evolve --task TASK --program STRIPPED.py --offline`) for
`--iterations` iterations or `--minutes` of wall time, whichever ends first.

It writes DIR/untuned_bench.json (`kind: evokernel-bench-untuned`): the seed's and the best
program's fitness (geomean over the public scenarios of the speedup's 95% lower bound against
the task's baseline) and per-scenario speedups, whether the best is correct and at least as
fast as the seed, what each mutator kind did, and the best program's diff against the seed;
the run directory is DIR/run. It prints the diff and a one-line verdict.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

KIND = "evokernel-bench-untuned"
_TUNE = re.compile(r"\s*#\s*tune:.*$")


def strip_tune(source: str) -> str:
    """`source` with every `# tune: ...` comment removed (the knob values stay)."""
    return "".join(_TUNE.sub("", line.rstrip("\n")) + "\n" for line in source.splitlines())


def _scenarios(result: Any) -> dict[str, dict[str, Any]]:
    if result is None:
        return {}
    return {
        s.name: {
            "speedup": s.speedup,
            "ci95": list(s.speedup_ci) if s.speedup_ci else None,
            "flags": list(s.flags),
        }
        for s in result.scenarios
    }


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from evokernel import device as devices
    from evokernel.evolve.config import config_from_dict
    from evokernel.evolve.database import Database
    from evokernel.evolve.problem import KernelProblem
    from evokernel.evolve.session import run_search
    from evokernel.evolve.summary import summarize
    from evokernel.tasks import get_task

    device = devices.resolve(args.device)
    devices.prepare(device)
    task = get_task(args.task)
    seed = strip_tune(task.seed_candidate.read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stripped_seed.py").write_text(seed)
    cfg = config_from_dict(
        {
            "seed": args.seed,
            "mutators": {"weights": {"offline": 1.0}},
            "budget": {"iterations": args.iterations, "wall_time_s": args.minutes * 60},
        }
    )
    problem = KernelProblem(task.name, device, cfg, seed_code=seed)
    started = time.monotonic()
    outcome = run_search(problem, cfg, out / "run")
    wall = time.monotonic() - started
    db = Database(out / "run" / "programs.sqlite", readonly=True)
    try:
        summary = summarize(db)
        rows = list(db.programs)
        first = db.get("seed")
        correct = [p for p in rows if p.fitness is not None]
        best = max(correct, key=lambda p: (p.fitness, -p.iteration)) if correct else first
        seed_result, best_result = db.result("seed"), db.result(best.id)
    finally:
        db.close()
    diff = list(
        difflib.unified_diff(
            seed.splitlines(), best.code.splitlines(), "seed (tune stripped)", best.id,
            lineterm="", n=1,
        )
    )  # fmt: skip
    gpu = seed_result.device.name if seed_result and seed_result.device else ""
    return {
        "kind": KIND,
        "schema": 1,
        "task": task.name,
        "device": device,
        "gpu": gpu,
        "fitness_label": summary.fitness_label,
        "stop_reason": outcome.stop_reason,
        "iterations_done": summary.iterations_done,
        "evaluated": summary.evaluated,
        "valid": summary.valid,
        "failed": summary.failed,
        "wall_s": round(wall, 1),
        "seed_fitness": first.fitness,
        "best_id": best.id,
        "best_fitness": best.fitness,
        "best_correct": best.correct,
        "at_least_as_fast": (
            best.fitness is not None and first.fitness is not None and best.fitness >= first.fitness
        ),
        "best_kind": best.kind,
        "best_description": best.description,
        "seed_scenarios": _scenarios(seed_result),
        "best_scenarios": _scenarios(best_result),
        "by_mutator": summary.by_mutator,
        "diff": diff,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the JSON and the run")
    p.add_argument("--task", default="decode_linear")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None)
    p.add_argument("--minutes", type=float, default=4.0, help="wall-time budget of the search")
    p.add_argument("--iterations", type=int, default=80)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} is not empty", file=sys.stderr)
        return 2
    doc = run_bench(args)
    path = out / "untuned_bench.json"
    path.write_text(json.dumps(doc, indent=1))
    print("\n".join(doc["diff"]) or "(the best program is the seed)")
    seed_fit, best_fit = doc["seed_fitness"], doc["best_fitness"]
    print(
        f"{doc['task']} on {doc['gpu'] or doc['device']}: {doc['evaluated']} evaluated "
        f"({doc['valid']} correct) in {doc['wall_s']:.0f} s; seed fitness {seed_fit}, best "
        f"{doc['best_id']} fitness {best_fit} ({doc['best_kind']}: {doc['best_description']}); "
        f"correct and at least as fast as the seed: "
        f"{doc['best_correct'] and doc['at_least_as_fast']}"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
