"""Benchmark of the search: the offline mutator against an exhaustive sweep of the same knobs.

    PYTHONPATH=src python3 -m evokernel.bench.evolve_bench --out $OUT [--tasks a,b]
        [--evals N] [--exhaustive-limit N] [--workers N] [--max-minutes M] [--reps N]
        [--device cuda|cpu] [--json PATH]

For each kernel task, from its seed (the naive starting point):

  offline     `evokernel evolve` with the offline mutator only (run dirs under
              OUT/evolve_runs/), for at most a quarter of the seed's declared knob space in
              evaluations (the seed's own evaluation included);
  exhaustive  every combination of the declared knob values (`blocks.knob_space` +
              `blocks.set_knobs`), evaluated by the same evaluator with the same options
              through `evaluate_many` (compile and correctness in parallel, timing exclusive).

Both arms use the same evaluator options: 30 timed rounds per scenario (`--reps`), no
profiler pass (`--profile` adds it), the evaluator's correctness checks in full. It prints,
per public scenario, the best speedup [95% interval] against the stock baseline in
each arm; evaluations per minute and the valid rate of each arm; and the offline best fitness
as a percentage of the exhaustive best (the goal: >= 98% within <= 25% of the evaluations).
The figures go to OUT/evolve_bench.json; the last stdout line is the same document.

Fitness is `evolve.fitness` (geometric mean of the speedup intervals' lower bounds). Both arms
pick their best by that fitness after many noisy measurements, so the exhaustive best carries
more selection luck than the offline one: small shortfalls can be noise.

`--device cpu` is a smoke mode for tests (Triton interpreter, correctness only: every
correct program has fitness 1, so the percentage says nothing about speed).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evokernel import device as devices
from evokernel.evaluate.result import EvalResult
from evokernel.evolve.fitness import fitness_label, kernel_fitness
from evokernel.tasks import blocks

GOAL_PCT = 98.0


@dataclass
class Arm:
    name: str  # "offline" | "exhaustive"
    hardware: str = ""  # the device name the evaluator reported
    evaluations: int = 0
    valid: int = 0
    wall_s: float = 0.0
    best_fitness: float | None = None
    best_knobs: dict[str, Any] = field(default_factory=dict)
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Every evaluated program, in order: knob values, fitness (None: incorrect), per-scenario
    # speedup lower bounds and wall time; with the exhaustive arm this is the measured
    # landscape of the knob space, so search strategies can be compared on it without a GPU.
    programs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def evals_per_min(self) -> float:
        return 60.0 * self.evaluations / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "evals_per_min": round(self.evals_per_min, 2)}


def _knobs(code: str) -> dict[str, Any]:
    try:
        return blocks.knob_values(code)
    except blocks.BlockError:
        return {}


def _score(arm: Arm, code: str, result: EvalResult, device: str) -> None:
    """Fold one evaluated program into the arm's best fitness and per-scenario bests."""
    arm.evaluations += 1
    if result.device is not None:
        arm.hardware = result.device.name
    fit = kernel_fitness(result, device) if result.correct else None
    arm.programs.append(
        {
            "knobs": _knobs(code),
            "fitness": fit,
            "lower": {s.name: s.speedup_ci[0] for s in result.scenarios if s.speedup_ci},
            "reasons": result.reason_codes,
            "wall_s": round(result.wall_s, 2),
        }
    )
    if not result.correct:
        return
    arm.valid += 1
    if fit is not None and (arm.best_fitness is None or fit > arm.best_fitness):
        arm.best_fitness, arm.best_knobs = fit, _knobs(code)
    for s in result.scenarios:
        if s.speedup_ci is None:
            continue
        have = arm.scenarios.get(s.name)
        lower = 0.0 if s.flags else float(s.speedup_ci[0])
        if have is None or lower > have["lower"]:
            arm.scenarios[s.name] = {
                "regime": s.regime,
                "baseline": s.baseline,
                "lower": lower,
                "speedup": s.speedup,
                "ci": list(s.speedup_ci),
                "flags": list(s.flags),
                "knobs": _knobs(code),
            }


def _options(args: argparse.Namespace, device: str) -> Any:
    from evokernel.evaluate import EvalOptions

    return EvalOptions(
        timeout_s=args.timeout,
        time=device == "cuda",
        reps=args.reps or None,
        profile=args.profile,
    )


def run_exhaustive(task: str, seed: str, device: str, args: argparse.Namespace) -> Arm:
    from evokernel.evaluate import evaluate_many

    space = blocks.knob_space(seed)
    if args.exhaustive_limit:
        space = space[: args.exhaustive_limit]
    codes = [blocks.set_knobs(seed, values) for values in space]
    arm = Arm("exhaustive")
    options = _options(args, device)
    chunk = max(1, args.workers)  # small chunks: --max-minutes is checked between them
    t0 = time.monotonic()
    for i in range(0, len(codes), chunk):
        if time.monotonic() > args.deadline:
            print(f"  exhaustive: --max-minutes reached after {arm.evaluations}", flush=True)
            break
        part = codes[i : i + chunk]
        results = evaluate_many(task, part, device=device, options=options, workers=args.workers)
        for code, result in zip(part, results):
            _score(arm, code, result, device)
        arm.wall_s = time.monotonic() - t0
        print(
            f"  exhaustive {arm.evaluations}/{len(codes)}: valid {arm.valid}, best fitness "
            f"{_fmt(arm.best_fitness)}, {arm.evals_per_min:.1f} evals/min",
            flush=True,
        )
    return arm


def run_offline(task: str, device: str, evals: int, out: Path, args: argparse.Namespace) -> Arm:
    from evokernel.evolve.config import config_from_dict
    from evokernel.evolve.problem import KernelProblem
    from evokernel.evolve.session import create_session

    workers = args.offline_workers or (2 if device == "cuda" else 1)
    left = args.deadline - time.monotonic()
    wall_s = max(1.0, left) if math.isfinite(left) else 0.0  # 0: no limit
    cfg = config_from_dict(
        {
            "seed": args.seed,
            "in_flight": workers,
            "islands": {"count": 2, "migration_interval": 2, "migration_count": 1},
            "selection": {"exploit": 0.8, "explore": 0.1, "random": 0.1},
            # the seed is the first evaluation; --max-minutes bounds the session
            "budget": {
                "iterations": max(0, evals - 1),
                "wall_time_s": wall_s,
            },
            "evaluator": {
                "workers": workers,
                "timeout_s": args.timeout,
                "reps": args.reps,
                "profile": args.profile,
            },
        }
    )
    problem = KernelProblem(task, device, cfg)
    session = create_session(out / task, problem, cfg)
    arm = Arm("offline")
    t0 = time.monotonic()
    try:
        session.execute(stream=io.StringIO() if args.quiet else sys.stdout, live=False)
        arm.wall_s = time.monotonic() - t0
        for p in session.db.programs:
            result = session.db.result(p.id)
            if p.evaluated_here and result is not None:
                _score(arm, p.code, result, device)
    finally:
        session.close()
    return arm


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _cell(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "-"
    lo, hi = entry["ci"]
    flag = f" {','.join(entry['flags'])}" if entry["flags"] else ""
    return f"{entry['speedup']:.3f}x [{lo:.3f}, {hi:.3f}]{flag}"


def bench_task(task: str, device: str, args: argparse.Namespace) -> dict[str, Any]:
    from evokernel.tasks import get_task

    seed = get_task(task).seed_candidate.read_text()
    size = blocks.knob_space_size(seed)
    evals = max(1, size // 4)
    if args.evals:
        evals = min(evals, args.evals)
    print(f"{task}: knob space {size}, offline budget {evals} evaluations", flush=True)
    offline = run_offline(task, device, evals, args.runs, args)
    print(
        f"  offline: {offline.evaluations} evaluations, valid {offline.valid}, best fitness "
        f"{_fmt(offline.best_fitness)} {offline.best_knobs}, {offline.evals_per_min:.1f} "
        "evals/min",
        flush=True,
    )
    exhaustive = run_exhaustive(task, seed, device, args)
    pct = None
    if offline.best_fitness is not None and exhaustive.best_fitness:
        pct = 100.0 * offline.best_fitness / exhaustive.best_fitness
    share = 100.0 * offline.evaluations / size
    rows = [("scenario", "regime", "exhaustive best", "offline best")]
    for name in sorted(set(exhaustive.scenarios) | set(offline.scenarios)):
        e, o = exhaustive.scenarios.get(name), offline.scenarios.get(name)
        regime = (e or o or {}).get("regime", "")
        rows.append((name, regime, _cell(e), _cell(o)))
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if pct is None or device == "cpu" or exhaustive.evaluations < size:
        verdict = "n/a"  # no speedups (cpu), or the exhaustive sweep was capped
    else:
        verdict = "met" if pct >= GOAL_PCT and share <= 25.0 else "missed"
    print(
        f"  offline best = {_fmt(pct)}% of the exhaustive best, with {share:.0f}% of the knob "
        f"space's evaluations (goal >= {GOAL_PCT:.0f}% within <= 25%): {verdict}  "
        f"[{fitness_label(device)}]",
        flush=True,
    )
    return {
        "task": task,
        "knob_space": size,
        "hardware": offline.hardware or exhaustive.hardware,
        "offline": offline.to_dict(),
        "exhaustive": exhaustive.to_dict(),
        "offline_pct_of_exhaustive": pct,
        "offline_share_of_evaluations_pct": share,
        "goal": verdict,
    }


def _line(t: dict[str, Any]) -> str:
    """One short row for the GPU check's summary."""
    off, ex = t["offline"], t["exhaustive"]
    valid = 100.0 * (off["valid"] + ex["valid"]) / max(1, off["evaluations"] + ex["evaluations"])
    return (
        f"evolve {t['task']}: offline {_fmt(off['best_fitness'])} = "
        f"{_fmt(t['offline_pct_of_exhaustive'])}% of exhaustive {_fmt(ex['best_fitness'])} "
        f"with {off['evaluations']}/{t['knob_space']} evals, goal {t['goal']}; "
        f"{off['evals_per_min']:.1f}/{ex['evals_per_min']:.1f} evals/min; valid {valid:.0f}%"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="evolve_bench", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    p.add_argument("--device", choices=("cuda", "cpu"), default=None)
    p.add_argument("--tasks", default="gqa_decode_attention,decode_linear")
    p.add_argument("--evals", type=int, default=0, help="cap on offline evaluations")
    p.add_argument("--exhaustive-limit", type=int, default=0, help="cap on the exhaustive sweep")
    p.add_argument("--workers", type=int, default=0, help="evaluate_many workers (exhaustive)")
    p.add_argument("--offline-workers", type=int, default=0, help="evaluation workers (offline)")
    p.add_argument(
        "--reps", type=int, default=30, help="timed rounds per scenario (0: evaluator default)"
    )
    p.add_argument("--profile", action="store_true", help="profiler pass per scenario")
    p.add_argument("--timeout", type=float, default=180.0, help="per evaluation, seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="default OUT/evolve_bench.json")
    p.add_argument(
        "--max-minutes",
        type=float,
        default=0.0,
        help="stop starting evaluations after this long (partial arms are reported as such)",
    )
    p.add_argument("--quiet", action="store_true", help="hide the offline run's progress lines")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = devices.resolve(args.device)
    devices.prepare(device)
    if not args.workers:
        args.workers = min(8, max(1, (os.cpu_count() or 2) // 2)) if device == "cuda" else 1
    args.out.mkdir(parents=True, exist_ok=True)
    args.runs = args.out / "evolve_runs"
    if args.runs.exists():
        args.runs = args.out / f"evolve_runs-{time.strftime('%Y%m%d-%H%M%S')}"
    t0 = time.monotonic()
    args.deadline = t0 + args.max_minutes * 60 if args.max_minutes else float("inf")
    tasks = [t for t in args.tasks.split(",") if t]
    report: dict[str, Any] = {
        "device": device,
        "fitness": fitness_label(device),
        "options": {
            "reps": args.reps or "evaluator default",
            "profile": args.profile,
            "exhaustive_workers": args.workers,
            "offline_workers": args.offline_workers or (2 if device == "cuda" else 1),
            "timeout_s": args.timeout,
            "seed": args.seed,
        },
        "tasks": [],
        "table": [],
        "wall_s": 0.0,
    }
    path = args.json or args.out / "evolve_bench.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for task in tasks:  # the document is rewritten after each task: partial runs leave figures
        report["tasks"].append(bench_task(task, device, args))
        report["table"] = [_line(t) for t in report["tasks"]]
        report["wall_s"] = round(time.monotonic() - t0, 1)
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"evolve_bench: {len(tasks)} task(s) in {report['wall_s']:.0f} s on {device}")
    print(json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
