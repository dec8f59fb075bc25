"""Evaluations per minute of the search on one GPU vs two, local backend and Ray backend.

    PYTHONPATH=src python3 scripts/gpu/scaleout_bench.py [--arms local1,local2,ray1,ray2]
        [--task decode_linear] [--window 120] [--reps 30] [--seed 0] [--per-gpu 1]

On a 2-GPU machine, in two calls of under 10 minutes each:

    PYTHONPATH=$PWD/src python3 scripts/gpu/scaleout_bench.py --arms local1,local2
    PYTHONPATH=$PWD/src python3 scripts/gpu/scaleout_bench.py --arms ray1,ray2

Each arm is one run of the offline search (`evokernel.evolve.run_search`) on the task, from its
seed, on a fresh run directory under $OUT/scaleout_runs/:

  local1   local backend, 1 worker (GPU 0)
  local2   local backend, 2 workers (GPU 0 and 1)
  ray1     ray backend, a local cluster started with 1 GPU
  ray2     ray backend, a local cluster started with 2 GPUs

`in_flight` equals the workers times `--per-gpu` (default 1; 2 keeps one evaluation queued per
GPU, so a GPU does not idle while the search waits to commit an earlier iteration). The
figure is evaluations per minute in a fixed window: the evaluations committed within
`--window` seconds after the seed's (so the seed's own serial evaluation and the final drain
are not counted), divided by the window. Before the local arms,
every GPU evaluates the seed once in this process, so no arm pays another's calibration. The
Ray arms start their cluster here (`ray.init(num_gpus=N)`); their workers are new processes,
which calibrate on their first evaluation (inside the window, as a real Ray run would; the
backend sends the seed's job to every other actor as a warm-up, which overlaps part of it).
`first_commit_s` says when each GPU committed its first counted evaluation.

Prints a table (evaluations/min, speedup of 2 GPUs over 1, evaluations per GPU, median
evaluation wall time) and writes $OUT/scaleout_bench.json. The goal: 2 GPUs >= 1.8x one GPU.
An arm whose backend is missing (no `ray` installed, fewer than 2 GPUs) is reported as skipped.
Each arm takes about `--window` + 2 evaluations (the seed's, and the drain at the end).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ARMS = ("local1", "local2", "ray1", "ray2")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--task", default="decode_linear")
    p.add_argument("--window", type=float, default=120.0, help="seconds counted per arm")
    p.add_argument("--per-gpu", type=int, default=1, help="iterations in flight per GPU")
    p.add_argument("--reps", type=int, default=30, help="timed rounds per scenario")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: a smoke run of this script (CPU slots for GPUs, correctness-only evaluations)",
    )
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    args = p.parse_args(argv)
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arm {unknown[0]} (known: {', '.join(ARMS)})")
    return args


def _config(args: argparse.Namespace, kind: str, gpus: int) -> Any:
    from evokernel.evolve import config_from_dict

    return config_from_dict(
        {
            "seed": args.seed,
            "in_flight": gpus * args.per_gpu,
            "islands": {"count": 2, "migration_interval": 4, "migration_count": 1},
            "evaluator": {"workers": gpus, "reps": args.reps, "profile": False},
            "backend": {"kind": kind},
            # counted from the end of the seed's evaluation; what is in flight then drains
            "budget": {"iterations": 10_000, "wall_time_s": args.window + 5.0},
            "checkpoint": {"write_sources": False},
        }
    )


def _figures(run_dir: Path, window: float) -> dict[str, Any]:
    from evokernel.evolve.database import Database

    db = Database(run_dir / "programs.sqlite", readonly=True)
    try:
        rows = [p for p in db.programs if p.evaluated_here]
        results = {p.id: db.result(p.id) for p in rows}
    finally:
        db.close()
    seed = next(p for p in rows if p.id == "seed")
    start = seed.committed_at
    counted = [p for p in rows if p.id != "seed" and p.committed_at <= start + window]

    def where(p: Any) -> str:
        return f"{p.evaluated_on.get('node') or 'local'}:{p.evaluated_on.get('gpu')}"

    per_gpu = Counter(where(p) for p in counted)
    first: dict[str, float] = {}
    for p in sorted(counted, key=lambda p: p.committed_at):
        first.setdefault(where(p), round(p.committed_at - start, 1))
    walls = [p.eval_wall_s for p in counted]
    # Mean phases per GPU (seconds per evaluation): a slow GPU shows where its time went.
    phases: dict[str, dict[str, list[float]]] = {}
    for p in counted:
        result = results.get(p.id)
        found = json.loads(result.artifacts.get("phases", "{}")) if result else {}
        into = phases.setdefault(where(p), {})
        for key, value in {"eval": p.eval_wall_s, **found}.items():
            into.setdefault(key, []).append(float(value))
    return {
        "evaluations": len(counted),
        "evals_per_min": round(60.0 * len(counted) / window, 2),
        "per_gpu": dict(sorted(per_gpu.items())),
        # seconds after the seed's commit when each GPU committed its first evaluation: a
        # late first commit is that GPU's cold start (new process, pool, calibration)
        "first_commit_s": dict(sorted(first.items())),
        "median_eval_s": round(statistics.median(walls), 1) if walls else None,
        "valid": sum(1 for p in counted if p.correct),
        "requeued": sum(p.evaluated_on.get("attempts", 1) - 1 for p in counted),
        "seed_eval_s": round(seed.eval_wall_s, 1),
        "phases_per_gpu": {
            gpu: {k: round(statistics.fmean(v), 2) for k, v in found.items()}
            for gpu, found in sorted(phases.items())
        },
    }


def _warm_every_gpu(task: str, gpus: int, reps: int) -> None:
    """One evaluation per GPU in this process: each GPU's calibration is then cached."""
    from evokernel.evaluate import EvalOptions, evaluate
    from evokernel.tasks import get_task

    seed = get_task(task).seed_candidate.read_text()
    for gpu in range(gpus):
        evaluate(task, seed, device="cuda", options=EvalOptions(reps=reps, profile=False), gpu=gpu)


def run_arm(arm: str, args: argparse.Namespace, visible: int) -> dict[str, Any]:
    from evokernel.evolve import KernelProblem, run_search
    from evokernel.evolve.backends.local import LocalBackend

    kind, gpus = arm[:-1], int(arm[-1])
    cuda = args.device == "cuda"
    if cuda and gpus > visible:
        return {"arm": arm, "skipped": f"{visible} GPU(s) visible"}
    cfg = _config(args, kind, gpus)
    run_dir = args.runs / arm
    problem = KernelProblem(args.task, args.device, cfg)
    t0 = time.monotonic()
    if kind == "local":
        backend: Any = LocalBackend(workers=gpus, gpus=visible)
        run_search(problem, cfg, run_dir, backend=backend, stream=io.StringIO())
    else:
        try:
            import ray
        except ImportError:
            return {"arm": arm, "skipped": "ray is not installed"}
        from evokernel.evolve.backends.raycluster import RayBackend

        slots = {"num_gpus": gpus} if cuda else {"num_cpus": gpus, "num_gpus": 0}
        ray.init(**slots, include_dashboard=False, log_to_driver=False)
        try:
            backend = RayBackend(args.device, None, workers=gpus)
            run_search(problem, cfg, run_dir, backend=backend, stream=io.StringIO())
            backend.close()
        finally:
            ray.shutdown()
    return {"arm": arm, "wall_s": round(time.monotonic() - t0, 1), **_figures(run_dir, args.window)}


def _table(arms: list[dict[str, Any]]) -> list[str]:
    rate = {a["arm"]: a.get("evals_per_min") for a in arms}
    lines = []
    for a in arms:
        if "skipped" in a:
            lines.append(f"scaleout {a['arm']:<7} skipped: {a['skipped']}")
            continue
        one = rate.get(a["arm"][:-1] + "1")
        ratio = f"  x{a['evals_per_min'] / one:.2f} vs 1 GPU" if a["arm"][-1] == "2" and one else ""
        lines.append(
            f"scaleout {a['arm']:<7} {a['evals_per_min']:6.2f} evals/min ({a['evaluations']} in "
            f"window, valid {a['valid']}, median {a['median_eval_s']} s, per GPU "
            f"{a['per_gpu']}){ratio}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from evokernel import device as devices
    from evokernel.evolve.backends import visible_gpus

    devices.prepare(args.device)
    visible = visible_gpus(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    args.runs = args.out / f"scaleout_runs-{time.strftime('%Y%m%d-%H%M%S')}"
    report: dict[str, Any] = {
        "task": args.task,
        "window_s": args.window,
        "reps": args.reps,
        "per_gpu": args.per_gpu,
        "device": args.device,
        "visible_gpus": visible,
        "arms": [],
    }
    if any(a.startswith("local") for a in args.arms) and visible:
        print(f"warming {visible} GPU(s) (one seed evaluation each)", flush=True)
        _warm_every_gpu(args.task, visible, args.reps)
    path = args.out / "scaleout_bench.json"
    for arm in args.arms:
        print(f"arm {arm}: running (~{args.window + 90:.0f} s)", flush=True)
        report["arms"].append(run_arm(arm, args, visible))
        report["table"] = _table(report["arms"])
        path.write_text(json.dumps(report, indent=2) + "\n")  # partial figures survive
        print(report["table"][-1], flush=True)
    print("\n".join(report["table"]))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
