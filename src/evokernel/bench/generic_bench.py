"""The offline mutator on an OpenEvolve example, with no LLM: seeded runs against random
restarts of the initial program, with the evaluator's noise measured.

    PYTHONPATH=src python -m evokernel.bench.generic_bench --out DIR
        [--example tests/evolve/openevolve/function_minimization] [--runs 5]
        [--iterations 100] [--restarts 100] [--reevaluate 30] [--workers 2]

For each of `--runs` seeds, `evokernel evolve` (the real session, controller, database and
sandboxed evaluations) runs the example's program and evaluator under its own `config.yaml`
(translated; the LLM mutators dropped, as `--offline` does) for `--iterations` iterations on
`--workers` CPU slots. The example's evaluator is noisy (the program it scores is a random
search, unseeded), so a run's best *reported* score is partly luck: the best of ~100 draws.
Two controls separate improvement from noise:

  * random restarts: the initial program evaluated `--restarts` times (the same number of
    evaluations as a run), giving the seed's score distribution and the best score a search
    that only re-rolls the seed would report;
  * re-evaluation: each run's best program evaluated `--reevaluate` more times.

A run *improved* when the bootstrap 95% interval of (mean of its best program's fresh scores -
mean of the seed's restarts) lies above 0. The document (`kind: evokernel-bench-generic`) goes
to DIR/generic_bench.json, the run directories under DIR/runs/, and a table is printed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

KIND = "evokernel-bench-generic"
EXAMPLE = Path(__file__).resolve().parents[3] / "tests/evolve/openevolve/function_minimization"
BOOTSTRAP = 4000


def _problem(example: Path, workers: int, iterations: int, seed: int) -> tuple[Any, Any]:
    from evokernel.evolve.config import config_from_dict, read_config
    from evokernel.evolve.generic import GenericProblem
    from evokernel.evolve.session import offline_only

    config = example / "config.yaml"
    cfg, _ = read_config(config if config.is_file() else None)
    data = offline_only(cfg).to_dict()
    data["evaluator"]["workers"] = workers
    data["budget"]["iterations"] = iterations
    data["seed"] = seed
    cfg = config_from_dict(data)
    problem = GenericProblem.from_files(
        example / "initial_program.py", example / "evaluator.py", "cpu", cfg
    )
    return problem, cfg


def _scores(problem: Any, code: str, n: int, workers: int) -> list[float]:
    """`n` fresh evaluations of `code` (a failure scores 0, as OpenEvolve counts it)."""
    from evokernel.evolve.threads import DaemonThreads

    pool = DaemonThreads(workers, "reevaluate")
    futures = [pool.submit(problem.evaluate, code) for _ in range(n)]
    return [problem.fitness(f.result()) or 0.0 for f in futures]


def bootstrap_ci(a: list[float], b: list[float], rng: random.Random) -> tuple[float, float]:
    """95% bootstrap interval of mean(a) - mean(b)."""
    diffs = []
    for _ in range(BOOTSTRAP):
        ra = [rng.choice(a) for _ in a]
        rb = [rng.choice(b) for _ in b]
        diffs.append(sum(ra) / len(ra) - sum(rb) / len(rb))
    diffs.sort()
    return diffs[int(0.025 * BOOTSTRAP)], diffs[int(0.975 * BOOTSTRAP) - 1]


def run_bench(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    from evokernel.evolve.database import Database
    from evokernel.evolve.session import run_search

    example, out = Path(args.example), Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    problem, _ = _problem(example, args.workers, args.iterations, 0)
    seed_code = problem.seed_code
    log(f"random restarts: the initial program evaluated {args.restarts} times")
    restarts = _scores(problem, seed_code, args.restarts, args.workers)
    rng = random.Random(0)
    runs: list[dict[str, Any]] = []
    for seed in range(args.runs):
        problem, cfg = _problem(example, args.workers, args.iterations, seed)
        run_dir = out / "runs" / f"seed{seed}"
        t0 = time.monotonic()
        outcome = run_search(problem, cfg, run_dir)
        wall = time.monotonic() - t0
        db = Database(run_dir / "programs.sqlite", readonly=True)
        try:
            rows = list(db.programs)
            scored = [p for p in rows if p.fitness is not None]
            best = max(scored, key=lambda p: float(p.fitness or 0.0))
            evaluated = sum(1 for p in rows if p.evaluated_here)
            kinds: dict[str, int] = {}
            for p in rows:
                if p.evaluated_here and p.fitness is not None and p.iteration >= 0:
                    kinds[p.kind] = kinds.get(p.kind, 0) + 1
        finally:
            db.close()
        fresh = _scores(problem, best.code, args.reevaluate, args.workers)
        lo, hi = bootstrap_ci(fresh, restarts, rng)
        gain = statistics.mean(fresh) - statistics.mean(restarts)
        diff = _diff(seed_code, best.code)
        runs.append(
            {
                "seed": seed,
                "stop_reason": outcome.stop_reason,
                "evaluated": evaluated,
                "wall_s": round(wall, 1),
                "best_id": best.id,
                "best_reported": best.fitness,
                "best_fresh_mean": statistics.mean(fresh),
                "best_fresh_sd": statistics.pstdev(fresh),
                "best_fresh": fresh,
                "gain": gain,
                "gain_ci95": [lo, hi],
                "improved": lo > 0,
                "change": diff,
                "evaluated_by_kind": kinds,
            }
        )
        log(
            f"seed {seed}: {evaluated} evaluations in {wall:.0f} s, best {best.id} reported "
            f"{best.fitness:.4f}, fresh mean {statistics.mean(fresh):.4f}, gain {gain:+.4f} "
            f"[{lo:+.4f}, {hi:+.4f}] {'improved' if lo > 0 else 'NOT improved'}"
        )
    gains = [float(r["gain"]) for r in runs]
    reported = [float(r["best_reported"] or 0.0) for r in runs]
    return {
        "kind": KIND,
        "schema": 1,
        "example": str(example),
        "mutators": "offline only (no LLM)",
        "workers": args.workers,
        "iterations": args.iterations,
        "seed_restarts": {
            "n": len(restarts),
            "mean": statistics.mean(restarts),
            "sd": statistics.pstdev(restarts),
            "max": max(restarts),
            "scores": restarts,
        },
        "runs": runs,
        "median_gain": statistics.median(gains) if gains else None,
        "improved_runs": sum(r["improved"] for r in runs),
        "median_best_reported": statistics.median(reported) if reported else None,
        "wall_s": round(time.monotonic() - started, 1),
    }


def _diff(a: str, b: str) -> list[str]:
    import difflib

    return [
        line
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ][:20]


def format_table(doc: dict[str, Any]) -> str:
    s = doc["seed_restarts"]
    lines = [
        f"initial program, {s['n']} restarts: mean {s['mean']:.4f} (sd {s['sd']:.4f}), "
        f"best reported {s['max']:.4f}",
        "seed  evals  best reported  fresh mean (sd)     gain [95% CI]              improved",
    ]
    for r in doc["runs"]:
        lo, hi = r["gain_ci95"]
        lines.append(
            f"{r['seed']:>4}  {r['evaluated']:>5}  {r['best_reported']:>13.4f}  "
            f"{r['best_fresh_mean']:.4f} ({r['best_fresh_sd']:.4f})    "
            f"{r['gain']:+.4f} [{lo:+.4f}, {hi:+.4f}]   {'yes' if r['improved'] else 'NO'}"
        )
    lines.append(
        f"median gain {doc['median_gain']:+.4f}; improved in {doc['improved_runs']} of "
        f"{len(doc['runs'])} runs; {doc['wall_s']:.0f} s"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the JSON and the run dirs")
    p.add_argument("--example", default=str(EXAMPLE), help="dir with initial_program.py, ...")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--restarts", type=int, default=100)
    p.add_argument("--reevaluate", type=int, default=30)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    if Path(args.out).exists() and any(Path(args.out).iterdir()):
        print(f"error: {args.out} is not empty", file=sys.stderr)
        return 2
    doc = run_bench(args, log=lambda line: print(line, file=sys.stderr, flush=True))
    path = Path(args.out) / "generic_bench.json"
    path.write_text(json.dumps(doc, indent=1))
    print(format_table(doc))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
